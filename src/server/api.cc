// Placeholder so the library target exists; the implementation lands with the api layer.
#include "server/api.h"
