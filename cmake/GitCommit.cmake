# The git commit baked into reports (tool.git_commit) and --version, as of the build, not the configure: the target
# bsw_git_commit runs cmake/WriteGitCommit.cmake on every build and (re)writes generated/git_commit.hpp when the
# hash or the dirty state changed. Targets that print it depend on bsw_git_commit and include git_commit.hpp.
set(BSW_GIT_COMMIT_HEADER ${CMAKE_BINARY_DIR}/generated/git_commit.hpp)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/generated)
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUT=${BSW_GIT_COMMIT_HEADER}
                -P ${CMAKE_SOURCE_DIR}/cmake/WriteGitCommit.cmake)
add_custom_target(bsw_git_commit ALL
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUT=${BSW_GIT_COMMIT_HEADER}
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteGitCommit.cmake
  BYPRODUCTS ${BSW_GIT_COMMIT_HEADER}
  COMMENT "" VERBATIM)
