# bsw_module(NAME DIR [DEPS ...]): a static library of every .cpp (and .cu) under DIR, so a module grows by adding
# files. Modules with no sources yet are skipped, and so is any target that links one.
function(bsw_module name dir)
  file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.cpp)
  if(NOT _srcs)
    return()
  endif()
  add_library(${name} STATIC ${_srcs})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC bsw_warnings nlohmann_json::nlohmann_json ${BSW_FMT} ${ARGN})
endfunction()
