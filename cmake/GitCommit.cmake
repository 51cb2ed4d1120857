# The git commit baked into reports (tool.git_commit) and --version: the short hash, "-dirty" when tracked files
# differed from it at configure time, "unknown" outside a checkout. CMake reconfigures when HEAD moves (a commit,
# a checkout, a pull), so a binary built after `git commit` never reports the commit before it.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE BSW_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT BSW_GIT_COMMIT)
  set(BSW_GIT_COMMIT unknown)
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  RESULT_VARIABLE _dirty ERROR_QUIET)
  if(_dirty EQUAL 1)
    string(APPEND BSW_GIT_COMMIT "-dirty")
  endif()
  execute_process(COMMAND git rev-parse --absolute-git-dir WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE _git_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  foreach(_f HEAD logs/HEAD packed-refs)
    if(EXISTS "${_git_dir}/${_f}")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_git_dir}/${_f}")
    endif()
  endforeach()
endif()
