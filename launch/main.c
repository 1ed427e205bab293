#include "core/core.h"
int main(void) { return 0; }
