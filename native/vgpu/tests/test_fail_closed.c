/* Fail closed: with an unparseable limit (or an unusable shared region while a limit is set)
 * every GPU call we wrap is refused, and the reason is printed once. TEST_EXPECT_MSG names a
 * substring the message must contain. */
#include <fcntl.h>
#include <unistd.h>

#include "common.h"

static char captured[4096];

/* Runs the first libvgpu call with stderr captured. */
static CUresult first_call_capturing_stderr(void)
{
	char path[] = "/tmp/libvgpu-stderr.XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	CUresult r;
	ssize_t n;

	dup2(fd, 2);
	r = cuInit(0);
	dup2(saved, 2);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	n = read(fd, captured, sizeof(captured) - 1);
	captured[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	return r;
}

static void gpu_work_is_refused_with_a_message(void)
{
	const char *want = getenv("TEST_EXPECT_MSG");
	CUdeviceptr p = 0;
	size_t f, t;
	nvmlDevice_t d;
	nvmlMemory_t m;

	CHECK_EQ(first_call_capturing_stderr(), CUDA_ERROR_NOT_PERMITTED);
	fprintf(stderr, "    captured: %s", captured);
	CHECK(want != NULL && strstr(captured, want) != NULL);
	CHECK(strstr(captured, "fail closed") != NULL);
	CHECK_EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_NOT_PERMITTED);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_NOT_PERMITTED);
	CHECK_EQ(cuLaunchKernel(FAKE_KERNEL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
		 CUDA_ERROR_NOT_PERMITTED);
	nvmlInit_v2();
	nvmlDeviceGetHandleByIndex_v2(0, &d);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d, &m), NVML_ERROR_NO_PERMISSION);
}

/* No limit set: an unusable region costs accounting, not the workload. */
static void without_limits_an_unusable_region_is_not_fatal(void)
{
	CUdeviceptr p = 0;

	CHECK_EQ(first_call_capturing_stderr(), CUDA_SUCCESS);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(gpu_work_is_refused_with_a_message),
		CASE(without_limits_an_unusable_region_is_not_fatal),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
