/* Per-call cost of the calls libvgpu wraps, over the fake driver; prints "<op> <ns/call>".
 * Run once without and once with LD_PRELOAD=libvgpu.so; run.sh prints them side by side. */
#include <time.h>

#include "common.h"

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

#define BATCHES 9
/* Median over batches of the per-iteration time of `body`. */
#define MEASURE(name, iters, body)                                                                 \
	do {                                                                                       \
		double r[BATCHES];                                                                 \
		for (int i = 0; i < (iters) / 10; i++) {                                           \
			body;                                                                      \
		}                                                                                  \
		for (int b = 0; b < BATCHES; b++) {                                                \
			double t0 = now_ns();                                                      \
			for (int i = 0; i < (iters); i++) {                                        \
				body;                                                              \
			}                                                                          \
			r[b] = (now_ns() - t0) / (iters);                                          \
		}                                                                                  \
		qsort(r, BATCHES, sizeof(r[0]), cmp);                                              \
		printf("%s %.1f\n", name, r[BATCHES / 2]);                                         \
	} while (0)

int main(void)
{
	CUdeviceptr p = 0;
	size_t f, t;
	nvmlDevice_t d;
	nvmlMemory_t m;
	CUmemAllocationProp prop = {0};
	CUmemGenericAllocationHandle h;

	if (ctx_on(0) != 0)
		return 1;
	nvmlInit_v2();
	nvmlDeviceGetHandleByIndex_v2(0, &d);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	MEASURE("cuLaunchKernel", 200000,
		cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
	MEASURE("cuMemAlloc_v2+cuMemFree_v2(4MiB)", 20000,
		(cuMemAlloc_v2(&p, 4 << 20), cuMemFree_v2(p)));
	MEASURE("cuMemAllocAsync+cuMemFreeAsync(1MiB)", 20000,
		(cuMemAllocAsync(&p, 1 << 20, NULL), cuMemFreeAsync(p, NULL)));
	MEASURE("cuMemCreate+cuMemRelease(2MiB)", 20000,
		(cuMemCreate(&h, 2 << 20, &prop, 0), cuMemRelease(h)));
	MEASURE("cuMemGetInfo_v2", 100000, cuMemGetInfo_v2(&f, &t));
	MEASURE("nvmlDeviceGetMemoryInfo", 100000, nvmlDeviceGetMemoryInfo(d, &m));
	return 0;
}
