# Writes the man page tune.1 with help2man, from the built binary's own --help texts (the one
# source of the flags: the page cannot drift from the command line). Run as
#   cmake -DTUNE=path/to/tune -DHELP2MAN=path -DSTATIC=apps/tune/man/tune.h2m -DOUT=tune.1 -P ...
# Each subcommand's --help goes into a COMMANDS section, verbatim.
foreach(_v TUNE HELP2MAN STATIC OUT)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "TuneManPage.cmake: -D${_v}=... is required")
  endif()
endforeach()

set(_commands "run" "validate" "status" "ls" "checkpoints ls" "checkpoints best" "report"
              "export" "stop")
set(_text "[COMMANDS]\n")
foreach(_cmd IN LISTS _commands)
  separate_arguments(_args UNIX_COMMAND "${_cmd}")
  execute_process(COMMAND ${TUNE} ${_args} --help OUTPUT_VARIABLE _help RESULT_VARIABLE _rc
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "'tune ${_cmd} --help' failed (${_rc}): ${_err}")
  endif()
  # roff: a backslash is \e; a line starting with '.' or ' would be a request.
  string(REPLACE "\\" "\\e" _help "${_help}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" _help "${_help}")
  string(APPEND _text ".SS \"tune ${_cmd}\"\n.nf\n${_help}.fi\n")
endforeach()
get_filename_component(_out_dir "${OUT}" DIRECTORY)
file(WRITE "${_out_dir}/commands.h2m" "${_text}")

execute_process(
  COMMAND ${HELP2MAN} --no-info --section=1 "--manual=User Commands"
          --include=${_out_dir}/commands.h2m --include=${STATIC} --output=${OUT}.tmp ${TUNE}
  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "help2man failed (${_rc}): ${_err}")
endif()
file(RENAME "${OUT}.tmp" "${OUT}")
