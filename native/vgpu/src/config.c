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

int vgpu_parse_bytes(const char *s, uint64_t *out, const char **why)
{
	uint64_t whole = 0, frac = 0, frac_div = 1, mult = 0;
	char unit[8];
	size_t n = 0;
	bool digits = false, has_frac = false;

	s = skip_space(s);
	for (; isdigit((unsigned char)*s); s++, digits = true) {
		if (whole > (UINT64_MAX - 9) / 10)
			goto too_big;
		whole = whole * 10 + (uint64_t)(*s - '0');
	}
	if (*s == '.') {
		has_frac = true;
		for (s++; isdigit((unsigned char)*s); s++, digits = true) {
			if (frac_div >= 1000000000000ULL)
				continue; /* finer than a byte of a terabyte: ignore */
			frac = frac * 10 + (uint64_t)(*s - '0');
			frac_div *= 10;
		}
	}
	if (!digits) {
		*why = "expected a number of bytes such as 4Gi, 4G or 4096m";
		return -1;
	}
	s = skip_space(s);
	while (isalpha((unsigned char)*s)) {
		if (n + 1 >= sizeof(unit))
			goto bad_unit;
		unit[n++] = (char)tolower((unsigned char)*s++);
	}
	unit[n] = '\0';
	if (*skip_space(s) != '\0')
		goto bad_unit;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(unit, units[i].name) == 0)
			mult = units[i].mult;
	if (mult == 0)
		goto bad_unit;
	if (has_frac && mult == 1) {
		*why = "a fraction needs a unit (k, m, g, Ki, Mi, Gi)";
		return -1;
	}
	if (whole > UINT64_MAX / mult)
		goto too_big;
	*out = whole * mult + frac * mult / frac_div;
	return 0;
too_big:
	*why = "number too large";
	return -1;
bad_unit:
	*why = "unknown unit (use k, m, g, Ki, Mi or Gi)";
	return -1;
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
		snprintf(cfg->error, sizeof(cfg->error), "%s=\"%s\": %s", key, val, why);
	cfg->failed = true;
	return -1;
}

/* Reads KEY and KEY_<i>; the per-device value overrides the global one. */
static int parse_limits(struct vgpu_config *cfg, char *const *envp, const char *key, bool bytes)
{
	char name[64];
	const char *why = NULL, *v;
	uint64_t global = 0, b;
	unsigned int gp = 0, p;
	int rc = 0;

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

int vgpu_config_parse(struct vgpu_config *cfg, char *const *envp)
{
	const char *v;
	char *end;
	int rc = 0;

	memset(cfg, 0, sizeof(*cfg));
	cfg->log_level = VGPU_LOG_WARN;
	cfg->priority = 1;
	cfg->priority_hold_ms = VGPU_DEFAULT_PRIORITY_HOLD_MS;
	snprintf(cfg->shared_cache, sizeof(cfg->shared_cache), "%s", VGPU_DEFAULT_SHARED_CACHE);

	if ((v = env_get(envp, "LIBVGPU_LOG_LEVEL")) != NULL && *v) {
		int lvl = parse_log_level(v);
		if (lvl < 0)
			fprintf(stderr, "libvgpu: LIBVGPU_LOG_LEVEL=\"%s\" ignored (error|warn|info|debug or 0-3)\n", v);
		else
			cfg->log_level = lvl;
	}
	rc |= parse_limits(cfg, envp, "CUDA_DEVICE_MEMORY_LIMIT", true);
	rc |= parse_limits(cfg, envp, "CUDA_DEVICE_SM_LIMIT", false);
	for (int i = 0; i < VGPU_MAX_DEVICES; i++)
		cfg->any_mem_limit |= cfg->mem_limit[i] != 0;
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		if (cfg->sm_limit[i] >= 100)
			cfg->sm_limit[i] = 0; /* 100% is the whole device: nothing to throttle */
		cfg->any_sm_limit |= cfg->sm_limit[i] != 0;
	}
	if ((v = env_get(envp, "CUDA_DEVICE_MEMORY_SHARED_CACHE")) != NULL) {
		if (*v == '\0' || strlen(v) >= sizeof(cfg->shared_cache))
			rc |= fail(cfg, "CUDA_DEVICE_MEMORY_SHARED_CACHE", v, "empty or too long path");
		else
			snprintf(cfg->shared_cache, sizeof(cfg->shared_cache), "%s", v);
	}
	if ((v = env_get(envp, "CUDA_TASK_PRIORITY")) != NULL && *v) {
		errno = 0;
		long p = strtol(v, &end, 10);
		if (errno || end == v || *end != '\0' || p < 0 || p > 1000)
			fprintf(stderr, "libvgpu: CUDA_TASK_PRIORITY=\"%s\" ignored (integer 0..1000)\n", v);
		else
			cfg->priority = (int)p;
	}
	parse_priority_board(cfg, envp);
	cfg->gate_launches = cfg->any_sm_limit || cfg->priority_dir[0] != '\0';
	return rc ? -1 : 0;
}
