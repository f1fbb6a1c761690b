/* A tiny test helper: named cases, CHECK macros that report and carry on, one summary line. */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <string.h>

static int check_case_failed, check_passed, check_failed;
static const char *check_prog = "test";

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "    %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			check_case_failed = 1;                                                     \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);     \
		if (a_ != b_) {                                                                    \
			fprintf(stderr, "    %s:%d: %s == %s failed: %llu != %llu\n", __FILE__,      \
				__LINE__, #a, #b, a_, b_);                                         \
			check_case_failed = 1;                                                     \
		}                                                                                  \
	} while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
	do {                                                                                       \
		double a_ = (double)(a), b_ = (double)(b);                                         \
		if (a_ < b_ - (tol) || a_ > b_ + (tol)) {                                          \
			fprintf(stderr, "    %s:%d: %s ≈ %s failed: %.3f vs %.3f (±%.3f)\n",         \
				__FILE__, __LINE__, #a, #b, a_, b_, (double)(tol));                \
			check_case_failed = 1;                                                     \
		}                                                                                  \
	} while (0)

struct check_case {
	const char *name;
	void (*fn)(void);
};
#define CASE(fn) {#fn, fn}

/* Runs the cases named on the command line, or all of them; prints "ok"/"FAIL" per case. */
__attribute__((unused)) static int check_main(int argc, char **argv, const struct check_case *cases,
					    size_t n)
{
	const char *slash = strrchr(argv[0], '/');

	check_prog = slash ? slash + 1 : argv[0];
	for (size_t i = 0; i < n; i++) {
		int selected = argc < 2;
		for (int a = 1; a < argc; a++)
			selected |= strcmp(argv[a], cases[i].name) == 0;
		if (!selected)
			continue;
		check_case_failed = 0;
		cases[i].fn();
		printf("%s %s: %s\n", check_case_failed ? "FAIL" : "ok", check_prog, cases[i].name);
		fflush(stdout);
		if (check_case_failed)
			check_failed++;
		else
			check_passed++;
	}
	if (check_passed + check_failed == 0) {
		fprintf(stderr, "%s: no case matched\n", check_prog);
		return 2;
	}
	return check_failed ? 1 : 0;
}

#endif
