# The git commit baked into reports (tool.git_commit); "unknown" outside a checkout.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE BSW_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT BSW_GIT_COMMIT)
  set(BSW_GIT_COMMIT unknown)
endif()
