# What `cmake --install` puts beside the binaries (apps/ and lib/ install those, the Python and
# C++ helpers): the man page, shell completions, the documentation with the Debian copyright
# file and changelog; then the .deb (CPack).

# Debian's man pages and changelogs are gzip -9n'd (cmake/TuneGzip.cmake); gzip is essential.
find_program(GZIP_PROGRAM gzip REQUIRED)

# The man page, made at build time by help2man from the built tune's --help texts (one source:
# the command line's own definitions). Without help2man the build goes on and the install says
# it left the page out.
option(TUNE_MAN_PAGE "Generate the man page tune.1 with help2man" ON)
find_program(HELP2MAN_PROGRAM help2man)
set(TUNE_MAN_FILE ${CMAKE_BINARY_DIR}/man/tune.1)
if(TUNE_MAN_PAGE AND HELP2MAN_PROGRAM AND EXISTS "${HELP2MAN_PROGRAM}")
  add_custom_command(
    OUTPUT ${TUNE_MAN_FILE}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
            $<$<BOOL:${TUNE_SOURCE_DATE}>:SOURCE_DATE_EPOCH=${TUNE_SOURCE_DATE}>
            ${CMAKE_COMMAND} -DTUNE=$<TARGET_FILE:tune> -DHELP2MAN=${HELP2MAN_PROGRAM}
            -DSTATIC=${PROJECT_SOURCE_DIR}/apps/tune/man/tune.h2m -DOUT=${TUNE_MAN_FILE}
            -P ${PROJECT_SOURCE_DIR}/cmake/TuneManPage.cmake
    DEPENDS tune ${PROJECT_SOURCE_DIR}/apps/tune/man/tune.h2m
            ${PROJECT_SOURCE_DIR}/cmake/TuneManPage.cmake
    COMMENT "Generating the man page tune.1 (help2man)")
  add_custom_command(
    OUTPUT ${TUNE_MAN_FILE}.gz
    COMMAND ${CMAKE_COMMAND} -DGZIP=${GZIP_PROGRAM} -DFROM=${TUNE_MAN_FILE} -DTO=${TUNE_MAN_FILE}.gz
            -P ${PROJECT_SOURCE_DIR}/cmake/TuneGzip.cmake
    DEPENDS ${TUNE_MAN_FILE} ${PROJECT_SOURCE_DIR}/cmake/TuneGzip.cmake
    COMMENT "Compressing the man page tune.1.gz")
  add_custom_target(tune_man ALL DEPENDS ${TUNE_MAN_FILE}.gz)
  install(FILES ${TUNE_MAN_FILE}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
elseif(TUNE_MAN_PAGE)
  message(STATUS "help2man not found: no man page (apt-get install help2man)")
  install(CODE "message(STATUS \"Skipping the man page tune.1: help2man was not found when \
the build was configured (apt-get install help2man, then configure again)\")")
else()
  install(CODE "message(STATUS \"Skipping the man page tune.1 (TUNE_MAN_PAGE is OFF)\")")
endif()

# Completions where bash-completion and Debian's zsh look for them.
install(FILES ${PROJECT_SOURCE_DIR}/apps/tune/completion/tune.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME tune)
install(FILES ${PROJECT_SOURCE_DIR}/apps/tune/completion/_tune
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)

# The documentation, laid out as in the source tree so that its links work.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")

# cpack -G DEB (in the build dir): tune_<version>-1_<arch>.deb. The shared libraries' packages
# come from dpkg-shlibdeps over the installed binaries; the programs tune runs are named here.
# The "-1" (a Debian revision) makes it a non-native package, whose changelog is
# changelog.Debian.gz.
set(TUNE_DEB_MAINTAINER "tune maintainers <tune@localhost>"
    CACHE STRING "The .deb's Maintainer field and its changelog's signature")
set(CPACK_PACKAGE_NAME tune)
set(CPACK_PACKAGE_VENDOR "tune")
set(CPACK_PACKAGE_VERSION "${TUNE_DEB_VERSION}")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(TUNE_DEB_FULL_VERSION "${CPACK_PACKAGE_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "hyperparameter tuning for any training script, on this machine or over SSH")
# Lines under 80 columns (CPack indents each one into the control file's Description).
set(CPACK_PACKAGE_DESCRIPTION
    "tune runs hyperparameter searches over any training program described in a\n\
YAML file: trials as supervised subprocesses, checkpoint retention, schedulers\n\
(ASHA, HyperBand, PBT), TPE search, resume after a crash, SSH worker hosts and\n\
Slurm. A trial reports JSON lines on its standard output. Ray Tune's option\n\
names and layouts are accepted as well as tune's own.")
set(CPACK_PACKAGE_CONTACT "${TUNE_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "rsync, openssh-client, python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-optuna, slurm-client")
set(CPACK_GENERATOR DEB)
include(CPack)

# What Debian wants in /usr/share/doc/tune beside the documentation: the machine-readable
# copyright file (the project's licence, and third_party/'s), and the package's changelog, one
# entry naming the version built, dated by its commit (so the same commit gives the same file).
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
if(TUNE_SOURCE_DATE)
  set(_saved_epoch "$ENV{SOURCE_DATE_EPOCH}")
  set(ENV{SOURCE_DATE_EPOCH} "${TUNE_SOURCE_DATE}")  # string(TIMESTAMP) honours it
endif()
string(TIMESTAMP TUNE_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
if(TUNE_SOURCE_DATE)
  set(ENV{SOURCE_DATE_EPOCH} "${_saved_epoch}")
endif()
set(_changelog ${CMAKE_BINARY_DIR}/debian/changelog)
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${_changelog} @ONLY)
add_custom_command(
  OUTPUT ${_changelog}.Debian.gz
  COMMAND ${CMAKE_COMMAND} -DGZIP=${GZIP_PROGRAM} -DFROM=${_changelog}
          -DTO=${_changelog}.Debian.gz -P ${PROJECT_SOURCE_DIR}/cmake/TuneGzip.cmake
  DEPENDS ${_changelog} ${PROJECT_SOURCE_DIR}/cmake/TuneGzip.cmake
  COMMENT "Compressing the Debian changelog")
add_custom_target(tune_deb_changelog ALL DEPENDS ${_changelog}.Debian.gz)
install(FILES ${_changelog}.Debian.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
# What lintian reports on purpose (each override says why).
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME tune)
