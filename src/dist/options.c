/* The data-parallel options' defaults: the same whether or not this actc
 * was built with MPI (built in both configurations, like launched.c). */
#include "actc.h"

actc_dist_opts actc_dist_default_opts(void)
{
    actc_dist_opts o = {32, 0};
    return o;
}
