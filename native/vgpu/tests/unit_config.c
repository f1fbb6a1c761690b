/* Configuration parsing (DESIGN §4): sizes users write, percentages, fail-closed errors. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "vgpu.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static const struct {
	const char *in;
	uint64_t bytes;
} good_sizes[] = {
	{"4Gi", 4 * GiB},      {"4G", 4 * GiB},          {"4g", 4 * GiB},
	{"4096m", 4 * GiB},    {"4096Mi", 4 * GiB},      {"4GiB", 4 * GiB},
	{"4GB", 4 * GiB},      {"4194304k", 4 * GiB},    {"4294967296", 4 * GiB},
	{" 512 Mi ", 512 * MiB}, {"1.5g", 1536 * MiB},   {"0.5Gi", 512 * MiB},
	{"0", 0},              {"1Ti", 1ULL << 40},      {"15360m", 15 * GiB},
	{"1k", 1024},          {"1Ki", 1024},            {"12b", 12},
	/* exact, rounded down: decimals no longer overflow on the way (1.99999999t was 1.16 TiB) */
	{"1.99999999t", 2199023244556ULL},       {"1.5t", 1649267441664ULL},
	{"0.000000000001t", 1},                  {"17179869183.99999999Gi", 18446744073709551605ULL},
	{"18446744073709551615", UINT64_MAX},    {"00000000000000000001k", 1024},
};

static const char *const bad_sizes[] = {
	"", "  ", "4GX", "Gi", "-1", "0x10", "4 G i", "1.5", "4Gi4", "18446744073709551616",
	"17179869184Gi", "4%", "four", "16777216t", "17179869183.9999999999999Gi",
	"1.0000000000001g", "123456789012345678901", "000000000000000000001k", "0.5", ".", "1..5g",
	"1.5.g",
};

static void sizes_mean_what_users_think(void)
{
	for (size_t i = 0; i < sizeof(good_sizes) / sizeof(good_sizes[0]); i++) {
		uint64_t b = 1;
		const char *why = NULL;
		int rc = vgpu_parse_bytes(good_sizes[i].in, &b, &why);
		if (rc != 0 || b != good_sizes[i].bytes)
			fprintf(stderr, "    \"%s\": rc %d, %llu (%s)\n", good_sizes[i].in, rc,
				(unsigned long long)b, why ? why : "");
		CHECK(rc == 0);
		CHECK_EQ(b, good_sizes[i].bytes);
	}
}

static void unparseable_sizes_are_errors_with_a_reason(void)
{
	for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
		uint64_t b = 0;
		const char *why = NULL;
		int rc = vgpu_parse_bytes(bad_sizes[i], &b, &why);
		if (rc != -1)
			fprintf(stderr, "    \"%s\" accepted as %llu\n", bad_sizes[i],
				(unsigned long long)b);
		CHECK(rc == -1);
		CHECK(why != NULL && *why);
	}
}

static void percentages(void)
{
	unsigned int p = 7;
	const char *why;

	CHECK(vgpu_parse_percent("50", &p, &why) == 0 && p == 50);
	CHECK(vgpu_parse_percent(" 25% ", &p, &why) == 0 && p == 25);
	CHECK(vgpu_parse_percent("0", &p, &why) == 0 && p == 0);
	CHECK(vgpu_parse_percent("100", &p, &why) == 0 && p == 100);
	CHECK(vgpu_parse_percent("101", &p, &why) == -1);
	CHECK(vgpu_parse_percent("-5", &p, &why) == -1);
	CHECK(vgpu_parse_percent("50.5", &p, &why) == -1);
	CHECK(vgpu_parse_percent("", &p, &why) == -1);
	CHECK(vgpu_parse_percent("99999999999", &p, &why) == -1);
}

static void per_device_values_override_the_global_one(void)
{
	char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=2Gi", "CUDA_DEVICE_MEMORY_LIMIT_1=512m",
		       "CUDA_DEVICE_SM_LIMIT=30", "CUDA_DEVICE_SM_LIMIT_2=100",
		       "CUDA_DEVICE_SM_LIMIT_3=0", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/x/y.cache",
		       "CUDA_TASK_PRIORITY=0", "LIBVGPU_LOG_LEVEL=debug", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, env) == 0);
	CHECK(!c.failed);
	CHECK_EQ(c.mem_limit[0], 2 * GiB);
	CHECK_EQ(c.mem_limit[1], 512 * MiB);
	CHECK_EQ(c.mem_limit[15], 2 * GiB);
	CHECK_EQ(c.sm_limit[0], 30);
	CHECK_EQ(c.sm_limit[2], 0); /* 100% = the whole device, nothing to throttle */
	CHECK_EQ(c.sm_limit[3], 0);
	CHECK(strcmp(c.shared_cache, "/x/y.cache") == 0);
	CHECK_EQ(c.priority, 0);
	CHECK_EQ(c.log_level, VGPU_LOG_DEBUG);
}

static void nothing_set_means_no_limits(void)
{
	char *env[] = {"PATH=/bin", "CUDA_DEVICE_MEMORY_LIMITS=5", "CUDA_DEVICE_SM_LIMITED=5", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, env) == 0);
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		CHECK_EQ(c.mem_limit[i], 0);
		CHECK_EQ(c.sm_limit[i], 0);
	}
	CHECK(strcmp(c.shared_cache, VGPU_DEFAULT_SHARED_CACHE) == 0);
	CHECK_EQ(c.priority, 1);
	CHECK_EQ(c.log_level, VGPU_LOG_WARN);
	CHECK(c.priority_dir[0] == '\0');
	CHECK_EQ(c.priority_hold_ms, VGPU_DEFAULT_PRIORITY_HOLD_MS);
	CHECK(!c.gate_launches);
}

static void a_bad_limit_fails_closed_and_names_the_variable(void)
{
	char *env1[] = {"CUDA_DEVICE_MEMORY_LIMIT_3=4GX", NULL};
	char *env2[] = {"CUDA_DEVICE_SM_LIMIT=150", NULL};
	char *env3[] = {"CUDA_DEVICE_MEMORY_LIMIT=", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, env1) == -1);
	CHECK(c.failed);
	CHECK(strstr(c.error, "CUDA_DEVICE_MEMORY_LIMIT_3=\"4GX\"") != NULL);
	CHECK(vgpu_config_parse(&c, env2) == -1);
	CHECK(c.failed && strstr(c.error, "CUDA_DEVICE_SM_LIMIT") != NULL);
	CHECK(vgpu_config_parse(&c, env3) == -1);
	CHECK(c.failed);
}

/* A per-device name that names no device (HAMi's "_00", one past the last index, letters) was
 * ignored, leaving that device without its limit: now it fails closed and names the variable. */
static void a_device_index_out_of_range_fails_closed(void)
{
	static const char *const bad[] = {
		"CUDA_DEVICE_MEMORY_LIMIT_00=1Gi", "CUDA_DEVICE_MEMORY_LIMIT_16=1Gi",
		"CUDA_DEVICE_MEMORY_LIMIT_X=5",    "CUDA_DEVICE_MEMORY_LIMIT_=1Gi",
		"CUDA_DEVICE_MEMORY_LIMIT_-1=1Gi", "CUDA_DEVICE_MEMORY_LIMIT_1 =1Gi",
		"CUDA_DEVICE_MEMORY_LIMIT_100=1Gi", "CUDA_DEVICE_SM_LIMIT_01=50",
		"CUDA_DEVICE_SM_LIMIT_16=50",      "CUDA_DEVICE_SM_LIMIT_+1=50",
	};
	struct vgpu_config c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=2Gi", (char *)bad[i], NULL};
		char name[64];
		snprintf(name, sizeof(name), "%.*s=\"", (int)strcspn(bad[i], "="), bad[i]);
		CHECK(vgpu_config_parse(&c, env) == -1);
		CHECK(c.failed);
		if (strstr(c.error, name) == NULL || strstr(c.error, "0..15") == NULL)
			fprintf(stderr, "    %s: error \"%s\"\n", bad[i], c.error);
		CHECK(strstr(c.error, name) != NULL && strstr(c.error, "0..15") != NULL);
	}
	char *good[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=1Gi", "CUDA_DEVICE_MEMORY_LIMIT_15=2Gi",
			"CUDA_DEVICE_SM_LIMIT_10=50", NULL};
	CHECK(vgpu_config_parse(&c, good) == 0);
	CHECK_EQ(c.mem_limit[0], GiB);
	CHECK_EQ(c.mem_limit[15], 2 * GiB);
	CHECK_EQ(c.sm_limit[10], 50);
}

static void priority_board_settings(void)
{
	char *env[] = {"CUDA_TASK_PRIORITY=0", "CUDA_TASK_PRIORITY_DIR=/usr/local/vgpu/priority",
		       "CUDA_TASK_PRIORITY_HOLD_MS=500", NULL};
	char *unset[] = {"CUDA_TASK_PRIORITY_DIR=", "CUDA_TASK_PRIORITY=3", NULL};
	char *sm[] = {"CUDA_DEVICE_SM_LIMIT_7=40", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, env) == 0);
	CHECK(strcmp(c.priority_dir, "/usr/local/vgpu/priority") == 0);
	CHECK_EQ(c.priority, 0);
	CHECK_EQ(c.priority_hold_ms, 500);
	CHECK(c.gate_launches && !c.any_sm_limit);
	/* empty = unset: launches pass with one branch */
	CHECK(vgpu_config_parse(&c, unset) == 0);
	CHECK(c.priority_dir[0] == '\0');
	CHECK_EQ(c.priority, 3);
	CHECK_EQ(c.priority_hold_ms, VGPU_DEFAULT_PRIORITY_HOLD_MS);
	CHECK(!c.gate_launches);
	CHECK(vgpu_config_parse(&c, sm) == 0);
	CHECK(c.gate_launches && c.any_sm_limit);
}

static void a_bad_hold_or_board_dir_only_warns(void)
{
	static const char *const bad_holds[] = {"0", "-5", "2s", "60001", "1e3", " ", "99999999999999999999"};
	static char long_dir[4200];
	char hold[64], dir[4300];
	struct vgpu_config c;

	for (size_t i = 0; i < sizeof(bad_holds) / sizeof(bad_holds[0]); i++) {
		char *env[] = {hold, "CUDA_TASK_PRIORITY_DIR=/p", NULL};
		snprintf(hold, sizeof(hold), "CUDA_TASK_PRIORITY_HOLD_MS=%s", bad_holds[i]);
		CHECK(vgpu_config_parse(&c, env) == 0);
		CHECK(!c.failed);
		if (c.priority_hold_ms != VGPU_DEFAULT_PRIORITY_HOLD_MS)
			fprintf(stderr, "    \"%s\" accepted as %u\n", bad_holds[i], c.priority_hold_ms);
		CHECK_EQ(c.priority_hold_ms, VGPU_DEFAULT_PRIORITY_HOLD_MS);
		CHECK(strcmp(c.priority_dir, "/p") == 0);
	}
	memset(long_dir, 'd', sizeof(long_dir) - 1);
	snprintf(dir, sizeof(dir), "CUDA_TASK_PRIORITY_DIR=/%s", long_dir);
	char *env[] = {dir, "CUDA_TASK_PRIORITY_HOLD_MS=60000", NULL};
	CHECK(vgpu_config_parse(&c, env) == 0);
	CHECK(!c.failed && c.priority_dir[0] == '\0' && !c.gate_launches);
	CHECK_EQ(c.priority_hold_ms, 60000);
}

static void bad_priority_or_log_level_is_not_fatal(void)
{
	char *env[] = {"CUDA_TASK_PRIORITY=high", "LIBVGPU_LOG_LEVEL=loud", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, env) == 0);
	CHECK(!c.failed);
	CHECK_EQ(c.priority, 1);
	CHECK_EQ(c.log_level, VGPU_LOG_WARN);
}

/* ---- the limits file (src/limits_file.c), read here from a scratch path ---- */
static char scratch[256];

static const char *in_scratch(const char *name)
{
	static char path[512];

	if (scratch[0] == '\0') {
		snprintf(scratch, sizeof(scratch), "%s/unit_config.XXXXXX",
			 getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp");
		CHECK(mkdtemp(scratch) != NULL);
	}
	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	return path;
}

static const char *write_limits(const char *name, const char *text, size_t len)
{
	const char *path = in_scratch(name);
	FILE *f = fopen(path, "w");

	CHECK(f != NULL && fwrite(text, 1, len, f) == len && fclose(f) == 0);
	return path;
}

#define U0 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"
#define U1 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae01"
#define LIMITS_1GI_50                                                                            \
	"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "=1Gi\nCUDA_DEVICE_MEMORY_LIMIT_" U1    \
	"=2Gi\nCUDA_DEVICE_SM_LIMIT_" U0 "=50\nCUDA_TASK_PRIORITY=1\n"

/* Version 2 names devices by UUID; the environment's ordinal-keyed limits do not apply under it
 * (the tenant picks the ordinals), in either direction; a lower priority still does. */
static void the_limits_file_keys_devices_by_uuid_and_the_environments_limits_do_not_apply(void)
{
	const char *path = write_limits("limits.conf", LIMITS_1GI_50, strlen(LIMITS_1GI_50));
	char *raise[] = {"CUDA_DEVICE_MEMORY_LIMIT=8Gi", "CUDA_DEVICE_SM_LIMIT_0=90",
			 "CUDA_TASK_PRIORITY=0", NULL};
	char *lower[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=512m", "CUDA_DEVICE_SM_LIMIT=25",
			 "CUDA_TASK_PRIORITY=3", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_load(&c, raise, path) == 0);
	CHECK(!c.failed && c.limits_file);
	CHECK_EQ(c.file_devices, 2);
	CHECK_EQ(vgpu_file_slot(&c, U0), 0);
	CHECK_EQ(vgpu_file_slot(&c, "gpu-A0A1A2A3-A4A5-A6A7-A8A9-AAABACADAE01"), 1); /* any case */
	CHECK_EQ(vgpu_file_slot(&c, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae02"), -1);
	CHECK_EQ(c.file_mem[0], GiB);
	CHECK_EQ(c.file_mem[1], 2 * GiB);
	CHECK_EQ(c.file_sm[0], 50);
	CHECK_EQ(c.file_sm[1], 0);
	CHECK_EQ(c.mem_limit[0], 0);           /* 8Gi from the environment: not applied */
	CHECK_EQ(c.mem_limit[2], 0);
	CHECK_EQ(c.sm_limit[0], 0);
	CHECK_EQ(c.priority, 1);               /* 0 would be higher than the claim's */
	CHECK(c.any_mem_limit && c.any_sm_limit && c.gate_launches);
	CHECK(vgpu_config_load(&c, lower, path) == 0);
	CHECK_EQ(c.mem_limit[0], 0);           /* by ordinal: not applied either */
	CHECK_EQ(c.sm_limit[1], 0);
	CHECK_EQ(c.file_mem[0], GiB);
	CHECK_EQ(c.priority, 3);
}

/* Even a file with no limit at all gates launches: each launch's device must be one it names. */
static void any_limits_file_gates_launches(void)
{
	static const char text[] = "vgpu-bridge-limits 2\nCUDA_TASK_PRIORITY=1\n";
	struct vgpu_config c;
	char *env[] = {NULL};

	CHECK(vgpu_config_load(&c, env, write_limits("empty.conf", text, strlen(text))) == 0);
	CHECK(!c.failed && c.limits_file && c.file_devices == 0 && c.gate_launches);
	CHECK(!c.any_mem_limit && !c.any_sm_limit);
}

/* An init container and the app after it share one claim sized for the larger: each lowers the
 * claim's limits to its own share through VGPU_CONTAINER_*, which can never raise them. */
static void a_containers_own_share_only_lowers_the_claims_limits(void)
{
	const char *path = write_limits("limits.conf", LIMITS_1GI_50, strlen(LIMITS_1GI_50));
	char *lower[] = {"VGPU_CONTAINER_MEMORY_LIMIT_0=100m", "VGPU_CONTAINER_SM_LIMIT_0=20",
			 "CUDA_DEVICE_MEMORY_LIMIT_0=1Gi", NULL};
	char *raise[] = {"VGPU_CONTAINER_MEMORY_LIMIT_0=8Gi", "VGPU_CONTAINER_SM_LIMIT=100",
			 "VGPU_CONTAINER_MEMORY_LIMIT_1=0", NULL};
	char *plain[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=500m", "CUDA_DEVICE_SM_LIMIT_0=100",
			 "VGPU_CONTAINER_MEMORY_LIMIT=100m", "VGPU_CONTAINER_SM_LIMIT_0=30", NULL};
	struct vgpu_config c;

	/* under the file: the container's own share by ordinal, lowering the file's by UUID when a
	 * device is looked up (device.c; test_limits_file shows the effect) */
	CHECK(vgpu_config_load(&c, lower, path) == 0 && !c.failed && c.limits_file);
	CHECK_EQ(c.mem_limit[0], 100 * MiB);
	CHECK_EQ(c.mem_limit[1], 0);
	CHECK_EQ(c.sm_limit[0], 20);
	CHECK_EQ(c.file_mem[0], GiB);
	CHECK(vgpu_config_load(&c, raise, path) == 0 && !c.failed);
	CHECK_EQ(c.mem_limit[0], 8 * GiB);      /* the tighter of this and the file's applies */
	CHECK_EQ(c.mem_limit[1], 0);            /* 0 is no limit, not a lower one */
	CHECK_EQ(c.sm_limit[0], 0);             /* 100 is the whole card, not a lower limit */
	CHECK(vgpu_config_parse(&c, plain) == 0); /* no limits file: the same rule */
	CHECK_EQ(c.mem_limit[0], 100 * MiB);
	CHECK_EQ(c.mem_limit[5], 100 * MiB);
	CHECK_EQ(c.sm_limit[0], 30);            /* the claim's 100 is no limit: 30 is lower */
}

static void a_bad_container_share_fails_closed_and_names_it(void)
{
	char *bad_memory[] = {"CUDA_DEVICE_MEMORY_LIMIT=1Gi", "VGPU_CONTAINER_MEMORY_LIMIT_0=4GX", NULL};
	char *bad_sm[] = {"VGPU_CONTAINER_SM_LIMIT_0=150", NULL};
	char *bad_index[] = {"VGPU_CONTAINER_MEMORY_LIMIT_16=1Gi", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_parse(&c, bad_memory) == -1 && c.failed);
	CHECK(strstr(c.error, "VGPU_CONTAINER_MEMORY_LIMIT_0=\"4GX\"") != NULL);
	CHECK(vgpu_config_parse(&c, bad_sm) == -1 && strstr(c.error, "VGPU_CONTAINER_SM_LIMIT_0"));
	CHECK(vgpu_config_parse(&c, bad_index) == -1 && strstr(c.error, "0..15"));
}

static void without_a_limits_file_the_environment_decides(void)
{
	char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=8Gi", "CUDA_TASK_PRIORITY=0", NULL};
	const char *file = write_limits("plain-file", "x", 1);
	char under_a_file[600];
	struct vgpu_config c;

	snprintf(under_a_file, sizeof(under_a_file), "%s/limits.conf", file);
	CHECK(vgpu_config_load(&c, env, in_scratch("absent.conf")) == 0);
	CHECK(!c.failed && !c.limits_file);
	CHECK_EQ(c.mem_limit[3], 8 * GiB);
	CHECK_EQ(c.priority, 0);
	CHECK(vgpu_config_load(&c, env, under_a_file) == 0); /* ENOTDIR: not there either */
	CHECK(!c.failed && !c.limits_file);
}

static void the_limits_file_names_the_claims_region(void)
{
	static const char text[] = "vgpu-bridge-limits 2\n\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/claim/vgpu.cache\n";
	const char *path = write_limits("region.conf", text, strlen(text));
	char *env[] = {"CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine", "CUDA_DEVICE_MEMORY_LIMIT=1Gi", NULL};
	struct vgpu_config c;

	CHECK(vgpu_config_load(&c, env, path) == 0);
	CHECK(strcmp(c.shared_cache, "/claim/vgpu.cache") == 0);
	CHECK_EQ(c.file_devices, 0);
}

static void a_malformed_limits_file_fails_closed_and_names_it(void)
{
	static const struct {
		const char *text;
		size_t len; /* 0: strlen */
		const char *why;
	} bad[] = {
		{"", 0, "first line"},
		{"vgpu-bridge-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1Gi\n", 0, "version 1 (limits by CUDA ordinal)"},
		{"vgpu-bridge-limits 3\n", 0, "first line"},
		{"vgpu-bridge-limits 2 \n", 0, "first line"},
		{"CUDA_DEVICE_MEMORY_LIMIT_" U0 "=1Gi\n", 0, "first line"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT=1Gi\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_0=1Gi\n", 0, "per device: _GPU-<uuid>"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_SM_LIMIT_1=50\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_GPU-=1Gi\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_GPU-a/b=1Gi\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_GPU-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1Gi\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nPATH=/bin\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_TASK_PRIORITY_DIR=/x\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\n CUDA_TASK_PRIORITY=1\n", 0, "line 2: not a KEY=VALUE"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "=4GX\n", 0, "unknown unit"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_" U0 "=1Gi\r\n", 0, "unknown unit"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_SM_LIMIT_" U0 "=150\n", 0, "above 100"},
		{"vgpu-bridge-limits 2\nCUDA_TASK_PRIORITY=high\n", 0, "CUDA_TASK_PRIORITY=\"high\""},
		{"vgpu-bridge-limits 2\nCUDA_TASK_PRIORITY=-1\n", 0, "CUDA_TASK_PRIORITY=\"-1\""},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_SHARED_CACHE=\n", 0, "empty"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_SM_LIMIT_" U1 "=50\nCUDA_DEVICE_SM_LIMIT_" U1 "=90\n", 0,
		 "line 3: the key is set twice"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_SM_LIMIT_" U1 "=50\nCUDA_DEVICE_SM_LIMIT_GPU-A0A1A2A3-A4A5-A6A7-A8A9-AAABACADAE01=90\n", 0,
		 "named twice"},
		{"vgpu-bridge-limits 2\nCUDA_DEVICE_SM_LIMIT_GPU-1=50\0\n", 52, "NUL byte"},
	};
	static char big[4200];
	char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1Gi", NULL};
	struct vgpu_config c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
		const char *path = write_limits("bad.conf", bad[i].text, len);
		CHECK(vgpu_config_load(&c, env, path) == -1);
		if (!c.failed || strstr(c.error, path) == NULL || strstr(c.error, bad[i].why) == NULL)
			fprintf(stderr, "    case %zu: failed %d, error \"%s\" (want \"%s\")\n", i,
				c.failed, c.error, bad[i].why);
		CHECK(c.failed && strstr(c.error, path) && strstr(c.error, bad[i].why));
	}
	/* 4096 bytes is the most: blank lines pad a good file to exactly that, then one more */
	size_t head = strlen(LIMITS_1GI_50);
	memcpy(big, LIMITS_1GI_50, head);
	memset(big + head, '\n', sizeof(big) - head);
	CHECK(vgpu_config_load(&c, env, write_limits("big.conf", big, 4096)) == 0 && c.limits_file);
	CHECK(vgpu_config_load(&c, env, write_limits("big.conf", big, 4097)) == -1);
	CHECK(strstr(c.error, "larger than 4096 bytes") != NULL);
}

static void at_most_16_devices_in_the_limits_file(void)
{
	char text[4096], *env[] = {NULL};
	size_t n = (size_t)snprintf(text, sizeof(text), "vgpu-bridge-limits 2\n");
	struct vgpu_config c;

	for (int d = 0; d < 17; d++) {
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "CUDA_DEVICE_MEMORY_LIMIT_GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae%02x=1Gi\n", d);
		if (d == 15) /* 16 is the most */
			CHECK(vgpu_config_load(&c, env, write_limits("16.conf", text, n)) == 0 &&
			      c.file_devices == 16);
	}
	CHECK(vgpu_config_load(&c, env, write_limits("17.conf", text, n)) == -1);
	CHECK(strstr(c.error, "more than 16 devices") != NULL);
}

/* A link (even to a good file), a FIFO with no writer, a directory: fail closed, never block. */
static void a_link_fifo_or_directory_in_place_of_the_file_fails_closed(void)
{
	const char *good = write_limits("good.conf", LIMITS_1GI_50, strlen(LIMITS_1GI_50));
	char target[512], link_path[512], fifo[512], dir[512];
	char *env[] = {NULL};
	struct vgpu_config c;

	snprintf(target, sizeof(target), "%s", good);
	snprintf(link_path, sizeof(link_path), "%s", in_scratch("link.conf"));
	snprintf(fifo, sizeof(fifo), "%s", in_scratch("fifo.conf"));
	snprintf(dir, sizeof(dir), "%s", in_scratch("dir.conf"));
	CHECK(symlink(target, link_path) == 0 && mkfifo(fifo, 0644) == 0 && mkdir(dir, 0755) == 0);
	alarm(20); /* a blocking open of the FIFO would end the test here (SIGALRM) */
	CHECK(vgpu_config_load(&c, env, link_path) == -1 && strstr(c.error, "symbolic link"));
	CHECK(vgpu_config_load(&c, env, fifo) == -1 && strstr(c.error, "not a regular file"));
	CHECK(vgpu_config_load(&c, env, dir) == -1 && strstr(c.error, "not a regular file"));
	alarm(0);
	CHECK(vgpu_config_load(&c, env, target) == 0 && c.file_mem[0] == GiB);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(sizes_mean_what_users_think),
		CASE(unparseable_sizes_are_errors_with_a_reason),
		CASE(percentages),
		CASE(per_device_values_override_the_global_one),
		CASE(nothing_set_means_no_limits),
		CASE(a_bad_limit_fails_closed_and_names_the_variable),
		CASE(bad_priority_or_log_level_is_not_fatal),
		CASE(priority_board_settings),
		CASE(a_bad_hold_or_board_dir_only_warns),
		CASE(a_device_index_out_of_range_fails_closed),
		CASE(the_limits_file_keys_devices_by_uuid_and_the_environments_limits_do_not_apply),
		CASE(any_limits_file_gates_launches),
		CASE(at_most_16_devices_in_the_limits_file),
		CASE(a_containers_own_share_only_lowers_the_claims_limits),
		CASE(a_bad_container_share_fails_closed_and_names_it),
		CASE(without_a_limits_file_the_environment_decides),
		CASE(the_limits_file_names_the_claims_region),
		CASE(a_malformed_limits_file_fails_closed_and_names_it),
		CASE(a_link_fifo_or_directory_in_place_of_the_file_fails_closed),
	};
	int rc = check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));

	if (scratch[0]) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", scratch);
	}
	return rc;
}
