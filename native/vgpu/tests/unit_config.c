/* Configuration parsing (DESIGN §4): sizes users write, percentages, fail-closed errors. */
#include <stdint.h>

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
};

static const char *const bad_sizes[] = {
	"", "  ", "4GX", "Gi", "-1", "0x10", "4 G i", "1.5", "4Gi4", "18446744073709551616",
	"17179869184Gi", "4%", "four",
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
	char *env[] = {"PATH=/bin", "CUDA_DEVICE_MEMORY_LIMIT_X=5", NULL};
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
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
