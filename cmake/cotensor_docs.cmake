# The API reference (COTENSOR_BUILD_DOCS): Doxygen over the public headers, configured from
# docs/Doxyfile.in, HTML into <build>/docs/html. Every Doxygen warning fails the target. It runs
# doxygen only: nothing is compiled for it.
#   cmake -S . -B build/docs -G Ninja -DCOTENSOR_BUILD_DOCS=ON -DCOTENSOR_BUILD_TESTS=OFF \
#     -DCOTENSOR_BUILD_EXAMPLES=OFF -DCOTENSOR_BUILD_BENCH=OFF
#   cmake --build build/docs --target cotensor_docs
find_package(Doxygen OPTIONAL_COMPONENTS dot)
if(NOT DOXYGEN_FOUND)
  message(FATAL_ERROR "COTENSOR_BUILD_DOCS=ON needs doxygen, which was not found "
                      "(Debian: apt-get install -y doxygen graphviz; or set DOXYGEN_EXECUTABLE)")
endif()
if(TARGET Doxygen::dot)
  set(COTENSOR_DOCS_HAVE_DOT YES)
  get_filename_component(COTENSOR_DOCS_DOT_DIR "${DOXYGEN_DOT_EXECUTABLE}" DIRECTORY)
else()
  set(COTENSOR_DOCS_HAVE_DOT NO)  # class diagrams drawn by doxygen itself
  set(COTENSOR_DOCS_DOT_DIR "")
endif()
set(COTENSOR_DOCS_OUTPUT_DIR ${PROJECT_BINARY_DIR}/docs)
configure_file(docs/Doxyfile.in ${COTENSOR_DOCS_OUTPUT_DIR}/Doxyfile @ONLY)
file(GLOB_RECURSE cotensor_docs_headers CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/include/cotensor/*.hpp)
add_custom_command(
  OUTPUT ${COTENSOR_DOCS_OUTPUT_DIR}/html/index.html
  COMMAND Doxygen::doxygen ${COTENSOR_DOCS_OUTPUT_DIR}/Doxyfile
  DEPENDS ${COTENSOR_DOCS_OUTPUT_DIR}/Doxyfile ${cotensor_docs_headers}
          ${PROJECT_BINARY_DIR}/include/cotensor/config.hpp
  WORKING_DIRECTORY ${COTENSOR_DOCS_OUTPUT_DIR}
  COMMENT "Doxygen: the API reference, into ${COTENSOR_DOCS_OUTPUT_DIR}/html"
  VERBATIM)
add_custom_target(cotensor_docs DEPENDS ${COTENSOR_DOCS_OUTPUT_DIR}/html/index.html)

# docs/architecture.svg, committed beside its source docs/architecture.dot: regenerate it after
# editing the picture (`dot -Tsvg docs/architecture.dot -o docs/architecture.svg` does the same).
if(TARGET Doxygen::dot)
  add_custom_target(cotensor_architecture_svg
    COMMAND Doxygen::dot -Tsvg ${PROJECT_SOURCE_DIR}/docs/architecture.dot
            -o ${PROJECT_SOURCE_DIR}/docs/architecture.svg
    COMMENT "Graphviz: docs/architecture.dot -> docs/architecture.svg"
    VERBATIM)
endif()
