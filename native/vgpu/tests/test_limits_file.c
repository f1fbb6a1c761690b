/* The node agent's limits file at libvgpu's compiled-in path (/etc/vgpu-bridge/limits.conf, here
 * in a private mount namespace: tests/limits_ns.h), read by the preloaded library itself: the
 * file is the ceiling and the environment may only lower it; a malformed file, a link or a FIFO
 * there fails closed, without blocking. (The parsing table is unit_config's.) Run with
 * CUDA_DEVICE_MEMORY_SHARED_CACHE set to a fresh region and TEST_TMP to a scratch dir. */
#include <sys/sysmacros.h>

#include "limits_ns.h"

/* The fake driver's devices (tests/fake/fake.h): physical index in the last byte. */
#define U0 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"
#define U1 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae01"
#define FILE_1GI "vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "=1Gi\n"

static const char *err_file(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s.%d.err", getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp",
		 name, (int)getpid());
	return path;
}

static int file_has(const char *path, const char *needle)
{
	char line[1024];
	int found = 0;
	FILE *f = fopen(path, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

static void raising_is_ignored(void)
{
	static const char *const raise[] = {"CUDA_DEVICE_MEMORY_LIMIT=8Gi", "CUDA_DEVICE_MEMORY_LIMIT_0=8Gi", NULL};

	CHECK_EQ(run_alloc_worker(2 * GiB, raise, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(768 * MiB, raise, NULL), ALLOC_OK);
}

static void the_environment_cannot_raise_a_limit_of_the_file(void)
{
	in_a_container(FILE_1GI, raising_is_ignored);
}

/* The file keys devices by UUID: the environment's ordinal-keyed limits name devices the tenant
 * numbers, so they do not apply under it (SECURITY.md); a lower priority still does. */
static void ordinal_limits_do_not_apply(void)
{
	static const char *const lower[] = {"CUDA_DEVICE_MEMORY_LIMIT=256m", NULL};

	CHECK_EQ(run_alloc_worker(512 * MiB, lower, NULL), ALLOC_OK);
	CHECK_EQ(run_alloc_worker(2 * GiB, lower, NULL), ALLOC_OUT_OF_MEMORY);
}

static void the_environments_limits_by_ordinal_do_not_apply_under_the_file(void)
{
	in_a_container(FILE_1GI, ordinal_limits_do_not_apply);
}

/* In the child of in_a_container: the fake driver with two devices, CUDA seeing `visible`. */
static void two_devices(const char *visible)
{
	CHECK(setenv("FAKE_CUDA_DEVICES", "2", 1) == 0);
	CHECK(setenv("CUDA_VISIBLE_DEVICES", visible, 1) == 0);
}

CUresult cuCtxCreate(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxCreate_v3(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
CUresult cuCtxCreate_v4(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*ctx_create_fn)(CUcontext *, unsigned int, CUdevice);
typedef CUresult (*ctx_create_v3_fn)(CUcontext *, CUexecAffinityParam *, int, unsigned int,
				     CUdevice);
typedef CUresult (*ctx_create_v4_fn)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);

/* Every way to a context on CUDA ordinal `ordinal`: each cuCtxCreate version, the primary
 * context, and the same through cuGetProcAddress (as the runtime finds them: 3020 is
 * cuCtxCreate_v2, 11040 _v3, 12050 _v4) and dlsym on the driver. CUDA_SUCCESS when all succeed,
 * else the first error. */
static CUresult every_context_on(int ordinal)
{
	static const int versions[] = {3020, 11040, 12050};
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *pfn = NULL;
	CUcontext ctx;
	CUdevice d;
	CUresult r;

	CHECK(h != NULL && cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&d, ordinal) == CUDA_SUCCESS);
	if ((r = cuCtxCreate(&ctx, 0, d)) || (r = cuCtxCreate_v2(&ctx, 0, d)) ||
	    (r = cuCtxCreate_v3(&ctx, NULL, 0, 0, d)) || (r = cuCtxCreate_v4(&ctx, NULL, 0, d)) ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, d)) ||
	    (r = ((ctx_create_fn)dlsym(h, "cuCtxCreate_v2"))(&ctx, 0, d)) ||
	    (r = ((retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain"))(&ctx, d)))
		return r;
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		CHECK(cuGetProcAddress("cuCtxCreate", &pfn, versions[i], 0) == CUDA_SUCCESS);
		r = versions[i] == 3020    ? ((ctx_create_fn)pfn)(&ctx, 0, d)
		    : versions[i] == 11040 ? ((ctx_create_v3_fn)pfn)(&ctx, NULL, 0, 0, d)
					   : ((ctx_create_v4_fn)pfn)(&ctx, NULL, 0, d);
		if (r)
			return r;
	}
	CHECK(cuGetProcAddress("cuDevicePrimaryCtxRetain", &pfn, 12000, 0) == CUDA_SUCCESS);
	return ((retain_fn)pfn)(&ctx, d);
}

static CUresult alloc_on(int ordinal, uint64_t bytes)
{
	CUdeviceptr p;

	CHECK(ctx_on(ordinal) == 0);
	return cuMemAlloc_v2(&p, bytes);
}

/* Issue #25 item 2: a claim of 4 GiB on one card and 1 GiB on another, the tenant reordering
 * CUDA_VISIBLE_DEVICES=1,0. Ordinal 0 is the 1 GiB card and keeps 1 GiB; ordinal 1 has 4 GiB. */
static void limits_follow_the_uuid(void)
{
	two_devices("1,0");
	CHECK_EQ(alloc_on(0, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(total_mem(), GiB);
	CHECK_EQ(alloc_on(0, 768 * MiB), CUDA_SUCCESS);
	CHECK_EQ(alloc_on(1, 3 * GiB), CUDA_SUCCESS);
	CHECK_EQ(alloc_on(1, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY); /* 3 of its 4 GiB in use */
	CHECK_EQ(total_mem(), 4 * GiB);
}

static void a_reordered_cuda_visible_devices_keeps_each_cards_own_limit(void)
{
	in_a_container("vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "=4Gi\n"
		       "CUDA_DEVICE_MEMORY_LIMIT_" U1 "=1Gi\n", limits_follow_the_uuid);
}

/* Issue #25 item 3: a container with two claims' devices gets one claim's limits file; the
 * other claim's device (U1 here) is not in it: no context (so none of the driver's context
 * memory), no memory, no launches, no NVML view, a log line naming its UUID. The named device
 * works as before. */
/* How many times the fake NVML was asked for a UUID so far. */
static unsigned long nvml_uuid_reads(void)
{
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
	unsigned long (*reads)(void) =
		nvml ? (unsigned long (*)(void))dlsym(nvml, "fake_nvml_uuid_reads") : NULL;

	CHECK(reads != NULL);
	return reads ? reads() : 0;
}

static void the_unnamed_device_gets_nothing(void)
{
	const char *err = err_file("unnamed");
	int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	nvmlDevice_t h0, h1;
	nvmlMemory_t m;
	size_t bytes = 0;
	CUdeviceptr p;
	CUdevice d1;

	CHECK(fd >= 0 && dup2(fd, 2) == 2);
	two_devices("0,1");
	CHECK_EQ(every_context_on(1), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(every_context_on(0), CUDA_SUCCESS);
	/* A context on it all the same (one libvgpu never saw made: the fake driver's handle of
	 * ordinal 1 is 2) still gets no memory and no launches. */
	CHECK(cuCtxSetCurrent((CUcontext)(uintptr_t)2) == CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(launch_kind("kernel", NULL), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(launch_kind("graph", NULL), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(free_mem(), (size_t)-1);
	CHECK(cuDeviceGet(&d1, 1) == CUDA_SUCCESS);
	CHECK_EQ(cuDeviceTotalMem_v2(&bytes, d1), CUDA_ERROR_INVALID_DEVICE);
	CHECK(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(1, &h1) == NVML_SUCCESS &&
	      nvmlDeviceGetHandleByIndex_v2(0, &h0) == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h1, &m), NVML_ERROR_NO_PERMISSION);
	unsigned long reads = nvml_uuid_reads();
	CHECK(nvmlDeviceGetMemoryInfo(h0, &m) == NVML_SUCCESS && m.total == GiB);
	CHECK_EQ(nvml_uuid_reads() - reads, 1UL); /* the gate and the view share one read */
	CHECK_EQ(alloc_on(0, 512 * MiB), CUDA_SUCCESS);
	CHECK_EQ(launch_kind("kernel", NULL), CUDA_SUCCESS);
	CHECK_EQ(alloc_on(0, 768 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(file_has(err, U1) && file_has(err, "is not in " VGPU_LIMITS_FILE));
}

static void a_device_the_limits_file_does_not_name_gets_no_context_memory_or_launches(void)
{
	in_a_container(FILE_1GI, the_unnamed_device_gets_nothing);
}

/* Stream-ordered memory of the unnamed device, asked for from the named one's context: a pool
 * made on it, its default pool, a stream of it; none gets a byte. */
static void the_unnamed_devices_pools_and_streams_get_nothing(void)
{
	CUmemPoolProps on1 = {0};
	CUmemoryPool made = NULL, dflt = NULL;
	CUstream s1 = NULL;
	CUdeviceptr p;

	two_devices("0,1");
	CHECK(ctx_on(0) == 0);
	on1.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	on1.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	on1.location.id = 1;
	CHECK_EQ(cuMemPoolCreate(&made, &on1), CUDA_SUCCESS);
	CHECK_EQ(cuDeviceGetDefaultMemPool(&dflt, 1), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, MiB, made, NULL), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, MiB, dflt, NULL), CUDA_ERROR_INVALID_DEVICE);
	/* the fake driver's stream of device 1 (libvgpu refuses a context there: made directly) */
	CHECK(cuCtxSetCurrent((CUcontext)(uintptr_t)2) == CUDA_SUCCESS);
	CHECK(cuStreamCreate(&s1, 0) == CUDA_SUCCESS);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAllocAsync(&p, MiB, s1), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(fake_cuda_memory_used(1), 0);
	CHECK_EQ(cuMemAllocAsync(&p, MiB, NULL), CUDA_SUCCESS); /* the named device's own */
}

static void the_unnamed_device_gets_no_stream_ordered_memory_either(void)
{
	in_a_container(FILE_1GI, the_unnamed_devices_pools_and_streams_get_nothing);
}

/* A graph memory node on the unnamed device, made from the named one's context: refused when
 * it is added, so no instantiation or launch can map that card's memory. */
static void the_unnamed_devices_graph_memory_nodes_get_nothing(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode node;
	CUgraph g = NULL;

	two_devices("0,1");
	CHECK(ctx_on(0) == 0);
	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 1;
	p.bytesize = MiB;
	CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(fake_cuda_memory_used(1), 0);
	p.poolProps.location.id = 0;
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_SUCCESS);
	CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

static void the_unnamed_device_gets_no_graph_memory_either(void)
{
	in_a_container(FILE_1GI, the_unnamed_devices_graph_memory_nodes_get_nothing);
}

/* The e2e tiers' containers: the fake driver plays the GPUs NVIDIA_VISIBLE_DEVICES names (as the
 * container runtime would expose them), so the UUIDs libvgpu looks up are the node agent's. */
#define E2E_A "GPU-e2e00000-0000-4000-8000-00000000000a"
#define E2E_B "GPU-e2e00000-0000-4000-8000-00000000000b"
static void the_runtimes_devices(void)
{
	CHECK(setenv("NVIDIA_VISIBLE_DEVICES", E2E_A "," E2E_B, 1) == 0);
	CHECK(unsetenv("CUDA_VISIBLE_DEVICES") == 0 && unsetenv("FAKE_CUDA_DEVICES") == 0);
	CHECK_EQ(every_context_on(0), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(alloc_on(1, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(alloc_on(1, 768 * MiB), CUDA_SUCCESS);
}

static void the_fake_driver_plays_the_gpus_nvidia_visible_devices_names(void)
{
	in_a_container("vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" E2E_B "=1Gi\n",
		       the_runtimes_devices);
}

/* NVIDIA's DRA driver's containers: NVIDIA_VISIBLE_DEVICES=void and the card only as the device
 * node its CDI spec injects (/dev/nvidia<minor>, docs/reference/nvidia-dra-driver.md §3). The fake
 * driver plays the cards of the char nodes present, UUID by minor, as the real one sees them: the
 * limits file keyed by that UUID holds on its card; a card the file does not name gets nothing. */
#define MINOR3 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae03"
#define MINOR5 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae05"
CUresult cuDeviceGetUuid(CUuuid *, CUdevice);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);

/* A /dev of the container's own: null, nvidiactl, the cards of minors 3 and 5, and a plain file
 * at nvidia7's name (not a card: the real driver opens char nodes only). */
static int nvidias_device_nodes(void)
{
	static const struct { const char *path; unsigned int major, minor; } nodes[] = {
		{"/dev/null", 1, 3}, {"/dev/nvidiactl", 195, 255}, {"/dev/nvidia3", 195, 3},
		{"/dev/nvidia5", 195, 5},
	};
	int fd;

	if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=64k") < 0)
		return -1;
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
		if (mknod(nodes[i].path, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)) < 0)
			return -1;
	fd = open("/dev/nvidia7", O_WRONLY | O_CREAT, 0666);
	return fd < 0 ? -1 : close(fd);
}

static void nvml_sees(unsigned int index, unsigned int minor, const char *uuid)
{
	nvmlDevice_t d;
	unsigned int m = 99;
	char got[96] = "";

	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(index, &d), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMinorNumber(d, &m), NVML_SUCCESS);
	CHECK_EQ(m, minor);
	CHECK_EQ(nvmlDeviceGetUUID(d, got, sizeof(got)), NVML_SUCCESS);
	CHECK(strcmp(got, uuid) == 0);
}

static void nvidias_devices(void)
{
	unsigned int count = 0;
	CUuuid u;

	CHECK(nvidias_device_nodes() == 0);
	CHECK(setenv("NVIDIA_VISIBLE_DEVICES", "void", 1) == 0);
	CHECK(unsetenv("CUDA_VISIBLE_DEVICES") == 0 && unsetenv("FAKE_CUDA_DEVICES") == 0);
	CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
	CHECK_EQ(count, 2);
	nvml_sees(0, 3, MINOR3);
	nvml_sees(1, 5, MINOR5);
	CHECK_EQ(every_context_on(0), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(cuDeviceGetUuid(&u, 1), CUDA_SUCCESS);
	CHECK_EQ((unsigned char)u.bytes[15], 5);
	CHECK_EQ(alloc_on(1, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(alloc_on(1, 768 * MiB), CUDA_SUCCESS);
}

static void under_void_the_fake_driver_plays_the_cards_of_nvidias_device_nodes(void)
{
	in_a_container("vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" MINOR5 "=1Gi\n",
		       nvidias_devices);
}

/* An app container sharing its init container's claim (sized for the init's 1 GiB): its own
 * 256 MiB holds, and its own variable cannot lift it past the claim's. */
static void the_containers_own_share_holds(void)
{
	static const char *const app[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=1Gi",
					  "VGPU_CONTAINER_MEMORY_LIMIT_0=256m", NULL};
	static const char *const greedy[] = {"VGPU_CONTAINER_MEMORY_LIMIT_0=8Gi", NULL};

	CHECK_EQ(run_alloc_worker(512 * MiB, app, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(128 * MiB, app, NULL), ALLOC_OK);
	CHECK_EQ(run_alloc_worker(2 * GiB, greedy, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(768 * MiB, greedy, NULL), ALLOC_OK);
}

static void a_container_sharing_a_claim_keeps_its_own_lower_share(void)
{
	in_a_container(FILE_1GI, the_containers_own_share_holds);
}

static void refused_naming_the_file(void)
{
	const char *err = err_file("malformed");

	CHECK_EQ(run_alloc_worker(MiB, NULL, err), ALLOC_NOT_PERMITTED);
	CHECK(file_has(err, VGPU_LIMITS_FILE));
	CHECK(file_has(err, "fail closed"));
}

static void a_malformed_file_fails_closed(void)
{
	in_a_container("vgpu-bridge-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1Gi\n", refused_naming_the_file);
	in_a_container("vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_0=1Gi\n", refused_naming_the_file);
}

/* In place of the file: a link to a good file the tenant could have written. */
static void a_link_there(void)
{
	int fd = open(LIMITS_DIR "/elsewhere", O_WRONLY | O_CREAT, 0444);

	CHECK(fd >= 0 && write(fd, "vgpu-bridge-limits 2\n", 21) == 21 && close(fd) == 0);
	CHECK(symlink(LIMITS_DIR "/elsewhere", VGPU_LIMITS_FILE) == 0);
	refused_naming_the_file();
}

/* ... a FIFO nobody writes: a blocking open would hang every CUDA process of the container (the
 * worker's alarm ends it instead, and the case fails). */
static void a_fifo_there(void)
{
	CHECK(mkfifo(VGPU_LIMITS_FILE, 0644) == 0);
	refused_naming_the_file();
}

static void a_link_or_fifo_in_place_of_the_file_fails_closed_without_hanging(void)
{
	in_a_container("", a_link_there);
	in_a_container("", a_fifo_there);
}

/* "contain FILE PROGRAM [ARG...]": PROGRAM in a private mount namespace where FILE (say, one the
 * node agent wrote) is the limits file at VGPU_LIMITS_FILE, for tests outside this program
 * (tests/abuse). Exit status 125 when that cannot be set up. */
static int contain(const char *file, char **argv)
{
	static char text[8192];
	FILE *f = fopen(file, "r");
	size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;

	if (f == NULL || ferror(f) || fclose(f) != 0) {
		perror(file);
		return 125;
	}
	text[n] = '\0';
	if (limits_ns_enter() < 0 || put_limits_file(text) < 0)
		return 125;
	execv(argv[0], argv);
	perror(argv[0]);
	return 125;
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(the_environment_cannot_raise_a_limit_of_the_file),
		CASE(the_environments_limits_by_ordinal_do_not_apply_under_the_file),
		CASE(a_reordered_cuda_visible_devices_keeps_each_cards_own_limit),
		CASE(a_device_the_limits_file_does_not_name_gets_no_context_memory_or_launches),
		CASE(the_unnamed_device_gets_no_stream_ordered_memory_either),
		CASE(the_unnamed_device_gets_no_graph_memory_either),
		CASE(the_fake_driver_plays_the_gpus_nvidia_visible_devices_names),
		CASE(under_void_the_fake_driver_plays_the_cards_of_nvidias_device_nodes),
		CASE(a_container_sharing_a_claim_keeps_its_own_lower_share),
		CASE(a_malformed_file_fails_closed),
		CASE(a_link_or_fifo_in_place_of_the_file_fails_closed_without_hanging),
	};

	if (argc == 3 && strcmp(argv[1], "alloc") == 0)
		return alloc_worker(argv[2]);
	if (argc >= 4 && strcmp(argv[1], "contain") == 0)
		return contain(argv[2], argv + 3);
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
