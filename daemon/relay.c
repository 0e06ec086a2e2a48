/* relay: stub. */
#include "relay.h"
