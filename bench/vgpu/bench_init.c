/* First-call initialisation cost: the time of the first cuInit (where libvgpu initialises:
 * config, real symbols, shared region, slot) and of the first allocation after it, in a fresh
 * process. Prints "<first cuInit ns> <first cuMemAlloc ns>". */
#include <time.h>

#include "common.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int main(void)
{
	CUdeviceptr p;
	uint64_t t0, t1, t2, t3;

	t0 = now_ns();
	if (cuInit(0) != CUDA_SUCCESS)
		return 1;
	t1 = now_ns();
	if (ctx_on(0) != 0)
		return 1;
	t2 = now_ns();
	if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS)
		return 1;
	t3 = now_ns();
	printf("%llu %llu\n", (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
	return 0;
}
