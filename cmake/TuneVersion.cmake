# tune's version, from `git describe --always --dirty` at configure time (the project version
# alone when the source is not a git checkout, or git is missing). Sets:
#   TUNE_GIT_DESCRIBE    the describe output ("" outside git)
#   TUNE_VERSION_STRING  what `tune --version` prints after "tune "
#   TUNE_DEB_VERSION     the same as a Debian version (digits first; only [A-Za-z0-9.+~])
#   TUNE_SOURCE_DATE     the commit's time (seconds since the epoch; "" outside git), the date
#                        the man page carries, so that it does not change with the build day
# Configure runs again when HEAD moves or the index changes (a commit, a checkout, `git add`);
# an edit that nothing has staged yet shows as "-dirty" only after the next configure.
set(TUNE_GIT_DESCRIBE "")
set(TUNE_SOURCE_DATE "")
find_package(Git QUIET)
if(GIT_FOUND)
  # Only this project's own checkout (not a tarball unpacked inside some other repository).
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --show-toplevel
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _top ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_top)
    file(REAL_PATH "${_top}" _top)
  endif()
  file(REAL_PATH "${PROJECT_SOURCE_DIR}" _src)
endif()
if(GIT_FOUND AND _top STREQUAL _src)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _describe ERROR_QUIET RESULT_VARIABLE _rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0 AND _describe MATCHES "^[A-Za-z0-9._+~/-]+$")
    set(TUNE_GIT_DESCRIBE "${_describe}")
    execute_process(COMMAND ${GIT_EXECUTABLE} log -1 --format=%ct
                    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE _date ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_date MATCHES "^[0-9]+$")
      set(TUNE_SOURCE_DATE "${_date}")
    endif()
    foreach(_what HEAD index)
      execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path ${_what}
                      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                      OUTPUT_VARIABLE _path ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_path)
        get_filename_component(_path "${_path}" ABSOLUTE BASE_DIR ${PROJECT_SOURCE_DIR})
        if(EXISTS "${_path}")
          set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                       "${_path}")
        endif()
      endif()
    endforeach()
  endif()
endif()

if(TUNE_GIT_DESCRIBE)
  set(TUNE_VERSION_STRING "${PROJECT_VERSION} (git ${TUNE_GIT_DESCRIBE})")
  string(REGEX REPLACE "[^A-Za-z0-9.+~]" "." _deb "${TUNE_GIT_DESCRIBE}")
  set(TUNE_DEB_VERSION "${PROJECT_VERSION}+git${_deb}")
else()
  set(TUNE_VERSION_STRING "${PROJECT_VERSION}")
  set(TUNE_DEB_VERSION "${PROJECT_VERSION}")
endif()
message(STATUS "tune version: ${TUNE_VERSION_STRING}")
