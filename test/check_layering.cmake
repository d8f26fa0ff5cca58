# The floors' rule for private headers: a tool (tools/) and a benchmark
# (bench/) reach the runtime through its public headers alone (runtime/htp.h,
# the embedding API; runtime/htp_entry.h and runtime/htp_ops.h, the
# compiled-code ABI: what a block exports, and what it calls), never
# through a runtime/*_internal.h. Run as
#   cmake -DROOT=<source dir> -P check_layering.cmake
# It fails naming each file and line that breaks the rule.
cmake_minimum_required(VERSION 3.16)
set(public htp.h htp_entry.h htp_ops.h)
file(GLOB_RECURSE sources
     ${ROOT}/tools/*.c ${ROOT}/tools/*.h ${ROOT}/tools/*.cpp ${ROOT}/bench/*.c
     ${ROOT}/bench/*.cu)
set(broken "")
foreach(source ${sources})
  file(STRINGS ${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]runtime/")
  foreach(line ${includes})
    string(REGEX REPLACE ".*runtime/([^\">]+).*" "\\1" header "${line}")
    if(NOT header IN_LIST public)
      file(RELATIVE_PATH where ${ROOT} ${source})
      string(APPEND broken "  ${where}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(broken)
  message(FATAL_ERROR "private runtime headers included outside the runtime "
                      "(use runtime/htp.h, runtime/htp_entry.h or runtime/htp_ops.h):\n${broken}")
endif()
list(LENGTH sources count)
message(STATUS "layering: ${count} tool and benchmark sources use only the public runtime headers")
