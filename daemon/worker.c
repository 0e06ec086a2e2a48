/* worker: stub. */
#include "worker.h"
