#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "kt.h"
static void t0(void **s){(void)s;}
int main(void){K=tr_kernels_cpu();const struct CMUnitTest tests[]={cmocka_unit_test(t0)};return cmocka_run_group_tests(tests,NULL,NULL);}
