/*
 * clocale.h - the C locale around the library's public calls that read or
 * write numbers as text (configs, YAML, plan text, reports): a host
 * program that set a locale whose decimal point is a comma (setlocale
 * LC_ALL "") still gets "0.5" read and written.  Internal: per thread
 * (uselocale), so other threads of the host keep theirs.
 */
#ifndef RLB_CLOCALE_H
#define RLB_CLOCALE_H

#include <locale.h>

/*
 * Switch this thread to the C locale; returns what to give rlb_clocale_end
 * (the thread's locale before, or 0 when the C locale could not be made
 * and nothing changed).  Calls nest.
 */
locale_t rlb_clocale_begin(void);
void rlb_clocale_end(locale_t before);

#endif
