/* Configuration: the DESIGN §4 environment contract, read once into struct vgpu_config. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

struct unit {
	const char *name;
	uint64_t mult;
};

/* k/m/g/t are binary: HAMi device plugins write "<MiB>m" and users mean GiB by "4G". */
static const struct unit units[] = {
	{"", 1},
	{"b", 1},
	{"k", 1ULL << 10}, {"kb", 1ULL << 10}, {"ki", 1ULL << 10}, {"kib", 1ULL << 10},
	{"m", 1ULL << 20}, {"mb", 1ULL << 20}, {"mi", 1ULL << 20}, {"mib", 1ULL << 20},
	{"g", 1ULL << 30}, {"gb", 1ULL << 30}, {"gi", 1ULL << 30}, {"gib", 1ULL << 30},
	{"t", 1ULL << 40}, {"tb", 1ULL << 40}, {"ti", 1ULL << 40}, {"tib", 1ULL << 40},
};

static const char *skip_space(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* The unit of `s` (letters, any case, then only spaces); 0 when unknown. */
static uint64_t unit_multiplier(const char *s)
{
	char unit[8];
	size_t n = 0;

	s = skip_space(s);
	while (isalpha((unsigned char)*s)) {
		if (n + 1 >= sizeof(unit))
			return 0;
		unit[n++] = (char)tolower((unsigned char)*s++);
	}
	unit[n] = '\0';
	if (*skip_space(s) != '\0')
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(unit, units[i].name) == 0)
			return units[i].mult;
	return 0;
}

#define MAX_WHOLE_DIGITS 20 /* UINT64_MAX has 20 */
#define MAX_FRACTION_DIGITS 12

/* Exact: (whole · 10^f + fraction) · unit / 10^f in 128 bits, rounded down. With at most 20 whole
 * digits (< 2^67) and a unit of at most 2^40, whole · unit fits; once that is at most UINT64_MAX
 * (< 2^64), the whole mantissa · unit stays below 2^64 · 10^12 · 2 < 2^106. */
int vgpu_parse_bytes(const char *s, uint64_t *out, const char **why)
{
	unsigned __int128 whole = 0, fraction = 0, scale = 1, bytes;
	int whole_digits = 0, fraction_digits = 0;
	uint64_t mult;

	s = skip_space(s);
	for (; isdigit((unsigned char)*s); s++, whole_digits++)
		if (whole_digits < MAX_WHOLE_DIGITS)
			whole = whole * 10 + (unsigned)(*s - '0');
	if (*s == '.')
		for (s++; isdigit((unsigned char)*s); s++, fraction_digits++)
			if (fraction_digits < MAX_FRACTION_DIGITS) {
				fraction = fraction * 10 + (unsigned)(*s - '0');
				scale *= 10;
			}
	if (whole_digits + fraction_digits == 0) {
		*why = "expected a number of bytes such as 4Gi, 4G or 4096m";
		return -1;
	}
	if (whole_digits > MAX_WHOLE_DIGITS || fraction_digits > MAX_FRACTION_DIGITS) {
		*why = "too many digits (at most 20, and 12 after the point)";
		return -1;
	}
	if ((mult = unit_multiplier(s)) == 0) {
		*why = "unknown unit (use k, m, g, Ki, Mi or Gi)";
		return -1;
	}
	if (fraction_digits > 0 && mult == 1) {
		*why = "a fraction needs a unit (k, m, g, Ki, Mi, Gi)";
		return -1;
	}
	/* whole · unit <= UINT64_MAX leaves no room for a fraction to overflow: it adds < 1 unit */
	if (whole * mult > UINT64_MAX || (bytes = (whole * scale + fraction) * mult / scale) > UINT64_MAX) {
		*why = "number too large";
		return -1;
	}
	*out = (uint64_t)bytes;
	return 0;
}

int vgpu_parse_percent(const char *s, unsigned int *out, const char **why)
{
	unsigned int v = 0;
	bool digits = false;

	s = skip_space(s);
	for (; isdigit((unsigned char)*s); s++, digits = true) {
		v = v * 10 + (unsigned int)(*s - '0');
		if (v > 100)
			goto range;
	}
	s = skip_space(s);
	if (*s == '%')
		s = skip_space(s + 1);
	if (!digits || *s != '\0') {
		*why = "expected an integer percentage 0..100";
		return -1;
	}
	*out = v;
	return 0;
range:
	*why = "percentage above 100";
	return -1;
}

static const char *env_get(char *const *envp, const char *key)
{
	size_t n = strlen(key);

	for (; envp && *envp; envp++)
		if (strncmp(*envp, key, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

static int fail(struct vgpu_config *cfg, const char *key, const char *val, const char *why)
{
	if (!cfg->failed)
		snprintf(cfg->error, sizeof(cfg->error), "%s=\"%.200s\": %s", key, val, why);
	cfg->failed = true;
	return -1;
}

/* KEY_<i> must name a device by its canonical decimal index 0..VGPU_MAX_DEVICES-1: "_00", "_16"
 * or "_x" would otherwise be ignored silently, leaving that device without its limit. */
static int check_indices(struct vgpu_config *cfg, char *const *envp, const char *key)
{
	size_t n = strlen(key);
	int rc = 0;

	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '='), *d;
		if (eq == NULL || strncmp(e, key, n) != 0 || e[n] != '_')
			continue;
		d = e + n + 1;
		bool canonical = d < eq && (eq - d == 1 || *d != '0') && eq - d <= 2;
		int index = 0;
		for (const char *c = d; canonical && c < eq; c++) {
			canonical = isdigit((unsigned char)*c);
			index = index * 10 + (*c - '0');
		}
		if (!canonical || index >= VGPU_MAX_DEVICES) {
			char name[128];
			snprintf(name, sizeof(name), "%.*s", (int)(eq - e), e);
			rc = fail(cfg, name, eq + 1,
				  "no such device index (a CUDA ordinal 0..15, written without leading zeros)");
		}
	}
	return rc;
}

/* Reads KEY and KEY_<i>; the per-device value overrides the global one. */
static int parse_limits(struct vgpu_config *cfg, char *const *envp, const char *key, bool bytes)
{
	char name[64];
	const char *why = NULL, *v;
	uint64_t global = 0, b;
	unsigned int gp = 0, p;
	int rc = check_indices(cfg, envp, key);

	if ((v = env_get(envp, key)) != NULL) {
		if (bytes ? vgpu_parse_bytes(v, &global, &why) : vgpu_parse_percent(v, &gp, &why))
			rc = fail(cfg, key, v, why);
	}
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		snprintf(name, sizeof(name), "%s_%d", key, i);
		if (bytes)
			cfg->mem_limit[i] = global;
		else
			cfg->sm_limit[i] = gp;
		if ((v = env_get(envp, name)) == NULL)
			continue;
		if (bytes ? vgpu_parse_bytes(v, &b, &why) : vgpu_parse_percent(v, &p, &why)) {
			rc = fail(cfg, name, v, why);
			continue;
		}
		if (bytes)
			cfg->mem_limit[i] = b;
		else
			cfg->sm_limit[i] = p;
	}
	return rc;
}

/* The lower of two limits where 0 means none (an SM limit of 100 is none too). */
/* VGPU_CONTAINER_MEMORY_LIMIT[_<i>] and VGPU_CONTAINER_SM_LIMIT[_<i>]: the container's own share
 * where it shares its claim with other containers of the pod (an init container and the app that
 * follows it). The webhook puts them in the pod's env, where CDI's CUDA_* edits cannot replace
 * them; they only ever lower the claim's limits. A bad value fails closed like the claim's own. */
int vgpu_config_container_share(struct vgpu_config *own, char *const *envp)
{
	int rc;

	memset(own, 0, sizeof(*own));
	rc = parse_limits(own, envp, "VGPU_CONTAINER_MEMORY_LIMIT", true);
	rc |= parse_limits(own, envp, "VGPU_CONTAINER_SM_LIMIT", false);
	return rc ? -1 : 0;
}

static int lower_to_container_share(struct vgpu_config *cfg, char *const *envp)
{
	struct vgpu_config own;
	int rc = vgpu_config_container_share(&own, envp);

	if (rc && !cfg->failed) {
		memcpy(cfg->error, own.error, sizeof(cfg->error));
		cfg->failed = true;
	}
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		cfg->mem_limit[i] = vgpu_lower_limit(cfg->mem_limit[i], own.mem_limit[i]);
		if (own.sm_limit[i] < 100)
			cfg->sm_limit[i] = (unsigned int)vgpu_lower_limit(cfg->sm_limit[i] >= 100 ? 0 : cfg->sm_limit[i],
								 own.sm_limit[i]);
	}
	return rc;
}

static int parse_log_level(const char *v)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char *end;
	long n;

	for (int i = 0; i < 4; i++)
		if (strcasecmp(v, names[i]) == 0)
			return i;
	n = strtol(v, &end, 10);
	if (end == v || *end != '\0' || n < 0)
		return -1;
	return n > VGPU_LOG_DEBUG ? VGPU_LOG_DEBUG : (int)n;
}

/* The priority board is advisory: a bad value only warns (and leaves priority unenforced). */
static void parse_priority_board(struct vgpu_config *cfg, char *const *envp)
{
	const char *v;
	char *end;

	if ((v = env_get(envp, "CUDA_TASK_PRIORITY_DIR")) != NULL && *v) {
		if (strlen(v) >= sizeof(cfg->priority_dir) - 64) /* room for "/<uuid>.board" */
			fprintf(stderr, "libvgpu: CUDA_TASK_PRIORITY_DIR ignored (path too long); task "
					"priority not enforced\n");
		else
			snprintf(cfg->priority_dir, sizeof(cfg->priority_dir), "%s", v);
	}
	if ((v = env_get(envp, "CUDA_TASK_PRIORITY_HOLD_MS")) != NULL && *v) {
		errno = 0;
		unsigned long ms = strtoul(v, &end, 10);
		if (errno || end == v || *end != '\0' || !isdigit((unsigned char)*v) || ms == 0 ||
		    ms > VGPU_MAX_PRIORITY_HOLD_MS)
			fprintf(stderr, "libvgpu: CUDA_TASK_PRIORITY_HOLD_MS=\"%s\" ignored (integer 1..%u)\n",
				v, VGPU_MAX_PRIORITY_HOLD_MS);
		else
			cfg->priority_hold_ms = (unsigned int)ms;
	}
}

/* CUDA_TASK_PRIORITY: 0..1000. Returns 0, or -1 (value left alone) when set but bad. */
static int parse_priority(struct vgpu_config *cfg, char *const *envp)
{
	const char *v = env_get(envp, "CUDA_TASK_PRIORITY");
	char *end;
	long p;

	if (v == NULL || *v == '\0')
		return 0;
	errno = 0;
	p = strtol(v, &end, 10);
	if (errno || end == v || *end != '\0' || p < 0 || p > 1000 || !isdigit((unsigned char)*v))
		return -1;
	cfg->priority = (int)p;
	return 0;
}

static int parse_shared_cache(struct vgpu_config *cfg, char *const *envp)
{
	const char *v = env_get(envp, "CUDA_DEVICE_MEMORY_SHARED_CACHE");

	if (v == NULL)
		return 0;
	if (*v == '\0' || strlen(v) >= sizeof(cfg->shared_cache))
		return fail(cfg, "CUDA_DEVICE_MEMORY_SHARED_CACHE", v, "empty or too long path");
	snprintf(cfg->shared_cache, sizeof(cfg->shared_cache), "%s", v);
	return 0;
}

static void config_defaults(struct vgpu_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->log_level = VGPU_LOG_WARN;
	cfg->priority = 1;
	cfg->priority_hold_ms = VGPU_DEFAULT_PRIORITY_HOLD_MS;
	snprintf(cfg->shared_cache, sizeof(cfg->shared_cache), "%s", VGPU_DEFAULT_SHARED_CACHE);
}

void vgpu_config_settle(struct vgpu_config *cfg)
{
	cfg->any_mem_limit = cfg->any_sm_limit = false;
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		if (cfg->sm_limit[i] >= 100)
			cfg->sm_limit[i] = 0; /* 100% is the whole device: nothing to throttle */
		cfg->any_mem_limit |= cfg->mem_limit[i] != 0;
		cfg->any_sm_limit |= cfg->sm_limit[i] != 0;
	}
	for (int i = 0; i < cfg->file_devices; i++) {
		if (cfg->file_sm[i] >= 100)
			cfg->file_sm[i] = 0;
		cfg->any_mem_limit |= cfg->file_mem[i] != 0;
		cfg->any_sm_limit |= cfg->file_sm[i] != 0;
	}
	/* with a limits file, a launch checks that its device is one the file names */
	cfg->gate_launches = cfg->any_sm_limit || cfg->priority_dir[0] != '\0' || cfg->limits_file;
}

int vgpu_config_parse(struct vgpu_config *cfg, char *const *envp)
{
	const char *v;
	int rc = 0;

	config_defaults(cfg);
	if ((v = env_get(envp, "LIBVGPU_LOG_LEVEL")) != NULL && *v) {
		int lvl = parse_log_level(v);
		if (lvl < 0)
			fprintf(stderr, "libvgpu: LIBVGPU_LOG_LEVEL=\"%s\" ignored (error|warn|info|debug or 0-3)\n", v);
		else
			cfg->log_level = lvl;
	}
	rc |= parse_limits(cfg, envp, "CUDA_DEVICE_MEMORY_LIMIT", true);
	rc |= parse_limits(cfg, envp, "CUDA_DEVICE_SM_LIMIT", false);
	rc |= lower_to_container_share(cfg, envp);
	rc |= parse_shared_cache(cfg, envp);
	if (parse_priority(cfg, envp) < 0) /* priority is not a limit: warn, keep the default */
		fprintf(stderr, "libvgpu: CUDA_TASK_PRIORITY=\"%s\" ignored (integer 0..1000)\n",
			env_get(envp, "CUDA_TASK_PRIORITY"));
	parse_priority_board(cfg, envp);
	vgpu_config_settle(cfg);
	return rc ? -1 : 0;
}

int vgpu_config_parse_file_settings(struct vgpu_config *cfg, char *const *settings)
{
	int rc;

	config_defaults(cfg);
	rc = parse_shared_cache(cfg, settings);
	if (parse_priority(cfg, settings) < 0)
		rc = fail(cfg, "CUDA_TASK_PRIORITY", env_get(settings, "CUDA_TASK_PRIORITY"),
			  "expected an integer 0..1000");
	return rc ? -1 : 0;
}
