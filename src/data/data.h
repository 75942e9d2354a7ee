/* Internals of the data layer used by the layers above it. */
#ifndef ACTC_DATA_H
#define ACTC_DATA_H
#include "actc.h"

/* Drop the batch a source holds (its image tensor), so that it does not
 * outlive the epoch or evaluation that asked for it. */
void actc__source_drop(actc_source *s);
#endif
