# Warnings and sanitizers for every target cotensor builds, linked PRIVATE; never global flags.
add_library(cotensor_dev_flags INTERFACE)
target_compile_options(cotensor_dev_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual -Wcast-qual
  $<$<BOOL:${COTENSOR_WARNINGS_AS_ERRORS}>:-Werror>)
if(COTENSOR_SANITIZE)
  target_compile_options(cotensor_dev_flags INTERFACE
    -fsanitize=${COTENSOR_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(cotensor_dev_flags INTERFACE -fsanitize=${COTENSOR_SANITIZE})
endif()
