# Compresses FROM into TO as Debian wants it: gzip -9, no name and no time stamp in the header
# (-n), so that the same input always gives the same bytes. Run as
#   cmake -DGZIP=path/to/gzip -DFROM=file -DTO=file.gz -P TuneGzip.cmake
foreach(_v GZIP FROM TO)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "TuneGzip.cmake: -D${_v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${GZIP} -9 -n -c ${FROM} OUTPUT_FILE ${TO}.tmp RESULT_VARIABLE _rc
                ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  file(REMOVE ${TO}.tmp)
  message(FATAL_ERROR "gzip ${FROM} failed (${_rc}): ${_err}")
endif()
file(RENAME ${TO}.tmp ${TO})
