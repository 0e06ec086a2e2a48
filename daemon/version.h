/*
 * version: outboxd's version and those of the libraries it runs on, as
 * loaded at run time (outboxd -V): what a bug report needs.
 */
#ifndef OUTBOXD_VERSION_H
#define OUTBOXD_VERSION_H

#include <stddef.h>

/* "outboxd 0.3.0\nlibmariadb 3.3.20\n...", one "name version" line
 * each, with "(built with X)" where the library loaded is not the one
 * compiled against (when its headers say).  malloc'd. */
char *version_report(void);

#endif
