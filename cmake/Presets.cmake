# Embeds configs/models/*.json into the binary: bsw_embed_presets(OUTVAR) adds the custom command (it must be called
# in the directory whose target compiles the generated presets.cpp) and returns the file's path.
function(bsw_embed_presets outvar)
  file(GLOB _presets CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/configs/models/*.json)
  set(_cpp ${CMAKE_BINARY_DIR}/generated/presets.cpp)
  add_custom_command(
    OUTPUT ${_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${_cpp} -DDIR=${CMAKE_SOURCE_DIR}/configs/models
            -P ${CMAKE_SOURCE_DIR}/cmake/EmbedPresets.cmake
    DEPENDS ${_presets} ${CMAKE_SOURCE_DIR}/cmake/EmbedPresets.cmake
    COMMENT "Embedding model presets")
  set(${outvar} ${_cpp} PARENT_SCOPE)
endfunction()
