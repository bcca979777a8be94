# Included by CMake at llama.cpp's own project() call while llama-cpp-python builds it (make install:
# -DCMAKE_PROJECT_llama.cpp_INCLUDE=this file). The binding's CMakeLists forces llama.cpp's `common`
# library on, though the Python package neither ships nor loads it; it is about a quarter of the
# build's compile time (with its HTTP client). Turned off here, after the binding set it and before
# llama.cpp reads it.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build the common library (unused by the binding)" FORCE)
