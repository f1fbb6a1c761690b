/* SM shares over the fake driver: a launch loop that would keep the device 100% busy is held to
 * CUDA_DEVICE_SM_LIMIT, measured on the fake device's own busy time (not on what libvgpu
 * thinks). TEST_EXPECT_UTIL = expected percent; TEST_LAUNCH = kernel|ptsz|ex|coop|graph. */
#include <sys/wait.h>
#include <time.h>

#include "common.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef CUresult (*launch_ptsz_fn)(CUfunction, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
				   void **, void **);

static CUresult launch_one(const char *kind, launch_ptsz_fn ptsz)
{
	CUlaunchConfig cfg = {64, 1, 1, 256, 1, 1, 0, NULL, NULL, 0};

	if (strcmp(kind, "ptsz") == 0)
		return ptsz(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	if (strcmp(kind, "ex") == 0)
		return cuLaunchKernelEx(&cfg, FAKE_KERNEL, NULL, NULL);
	if (strcmp(kind, "coop") == 0)
		return cuLaunchCooperativeKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL);
	if (strcmp(kind, "graph") == 0)
		return cuGraphLaunch((CUgraphExec)(uintptr_t)0x2000, NULL);
	return cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
}

static void device_utilisation_follows_the_limit(void)
{
	const char *kind = getenv("TEST_LAUNCH") ? getenv("TEST_LAUNCH") : "kernel";
	double expect = atof(getenv("TEST_EXPECT_UTIL") ? getenv("TEST_EXPECT_UTIL") : "100");
	double tol = atof(getenv("TEST_TOLERANCE") ? getenv("TEST_TOLERANCE") : "5");
	double warmup = atof(getenv("TEST_WARMUP_S") ? getenv("TEST_WARMUP_S") : "1");
	double end = warmup + atof(getenv("TEST_MEASURE_S") ? getenv("TEST_MEASURE_S") : "2"), t0, t1 = 0;
	uint64_t busy0 = 0, busy1, n = 0;
	launch_ptsz_fn ptsz = NULL;
	int measuring = 0;

	CHECK(ctx_on(0) == 0);
	cuGetProcAddress("cuLaunchKernel", (void **)&ptsz, 12000,
			 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	CHECK(ptsz != NULL);
	t0 = now_s();
	for (;;) {
		double t = now_s() - t0;
		if (!measuring && t >= warmup) {
			busy0 = fake_cuda_busy_total_ns(0);
			t1 = now_s();
			measuring = 1;
		}
		if (t >= end)
			break;
		CHECK_EQ(launch_one(kind, ptsz), CUDA_SUCCESS);
		n++;
	}
	busy1 = fake_cuda_busy_total_ns(0);
	double util = (double)(busy1 - busy0) / 1e9 / (now_s() - t1) * 100;
	fprintf(stderr, "    %s: %llu launches, device busy %.1f%% (expected %.0f ± %.0f)\n", kind,
		(unsigned long long)n, util, expect, tol);
	printf("# util %s %.1f\n", kind, util);
	CHECK_NEAR(util, expect, tol);
	cuCtxSynchronize();
}

/* Two processes of the container on one (FAKE_GPU_STATE-shared) device: together they get the
 * limit, not the limit each. */
static void processes_share_one_sm_limit(void)
{
	double expect = atof(getenv("TEST_EXPECT_UTIL") ? getenv("TEST_EXPECT_UTIL") : "100");
	double t0, t1;
	uint64_t busy0, busy1, mine0, mine1;
	pid_t pid;
	int st;

	CHECK(getenv("FAKE_GPU_STATE") != NULL);
	CHECK(ctx_on(0) == 0);
	t0 = now_s();
	if ((pid = fork()) == 0) {
		while (now_s() - t0 < 3.3)
			cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
		cuCtxSynchronize();
		exit(0);
	}
	while (now_s() - t0 < 1.0)
		cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	busy0 = fake_cuda_busy_total_ns(0);
	mine0 = fake_cuda_busy_ns_pid(0, 1000000000ULL, fake_host_pid());
	t1 = now_s();
	while (now_s() - t0 < 3.0)
		cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	busy1 = fake_cuda_busy_total_ns(0);
	mine1 = fake_cuda_busy_ns_pid(0, 1000000000ULL, fake_host_pid());
	double util = (double)(busy1 - busy0) / 1e9 / (now_s() - t1) * 100;
	fprintf(stderr, "    two processes: device busy %.1f%% (expected %.0f ± 5); parent's share of "
			"the last second %.1f%% then %.1f%%\n",
		util, expect, mine0 / 1e7, mine1 / 1e7);
	CHECK_NEAR(util, expect, 5);
	CHECK(mine1 > 0 && mine1 < busy1 - busy0); /* both processes ran */
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(device_utilisation_follows_the_limit),
		CASE(processes_share_one_sm_limit),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
