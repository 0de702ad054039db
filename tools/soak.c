/* SPDX-License-Identifier: MIT */
/* tools/soak.c: gpux soak: forked clients checked while workers and gpuxd are killed at random. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "proc.h"
#include "proto.h"
#include "soak.h"
#include "tools.h"

extern char **environ;

#define DEVICES SOAK_DEVICES
#define TICK_US 20000u
#define SUP_DOWN_MAX_MS 1000u
/* The last part of the run has no kills: the workers then serve a while before the checks. */
#define QUIET_PERCENT 20u
#define SETTLE_NS (30ull * NSEC_PER_SEC)
/* Memory allowed above the baseline at the end: malloc keeps what it was given. */
#define RSS_SLACK_MIB 64u

const char *const soak_op_names[SOAK_OP_N] = { "run",    "queue", "frozen", "dbuf",
					       "module", "fork",  "fault",  "hang" };
const char *const soak_fault_names[SOAK_FAULT_N] = { "segv", "far",        "launch", "fork",
						     "exit", "exit_group", "abort" };

struct soak {
	struct soak_board *b;
	char dir[128];
	char gpuxd[PATH_MAX + 16];
	char log[PATH_MAX + 16];
	pid_t sup;
	uint64_t sup_down_until; /* gpuxd was killed: start it again then */
	uint64_t next_kill, next_sup_kill;
	unsigned nclients;
	uint64_t seed; /* as given, else the time: the summary prints it to repeat the run */
	uint64_t rng;  /* rnd()'s state, from the seed */
	uint64_t watchdog_ns;
	uint64_t rss_slack_kib; /* an ASan build's quarantine alone keeps 256 MiB */
	uint64_t clients, worker_kills, sup_kills, sup_deaths, hangs;
};

/* A measure of every process of the daemon: the leak checks compare two of them. */
struct snapshot {
	pid_t pid[1 + DEVICES];
	int fds[1 + DEVICES], memfds[1 + DEVICES], modules[1 + DEVICES];
	uint64_t rss[1 + DEVICES];
	int shm;
};

uint64_t soak_now(void)
{
	return tool_now();
}

bool soak_death_take(struct soak_board *b, unsigned dev, uint64_t gap)
{
	uint64_t now = soak_now(), last = atomic_load(&b->death_at[dev]);

	return !atomic_load(&b->quiet) && now - last >= gap &&
	       atomic_compare_exchange_strong(&b->death_at[dev], &last, now);
}

static uint64_t rnd(struct soak *s)
{
	uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int sup_start(struct soak *s)
{
	/* The sandbox on, whoever runs the soak: faulting kernels make forbidden calls. */
	char *argv[] = { s->gpuxd, "--socket",       s->b->sock, "--backend",
			 "host",   "--host-devices", "2",        "--slots",
			 "2",      "--cache-ttl-ms", "2000",     "--timeout-ms",
			 "60000",  "--host-sandbox", "on",       NULL };
	posix_spawn_file_actions_t fa;
	int r;

	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 1, s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	(void)posix_spawn_file_actions_adddup2(&fa, 1, 2);
	r = posix_spawn(&s->sup, s->gpuxd, &fa, NULL, argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	return -r;
}

/* gpuxd's status, with the devices in devs[] (IPC_DEVICES_MAX). */
static int status(struct soak *s, struct ipc_status *ret, struct ipc_dev_status *devs)
{
	return tool_status_query(s->b->sock, ret, devs);
}

/* Wait until gpuxd serves every device; ret_pids[i] gets device i's worker. */
static bool all_ready(struct soak *s, uint64_t until, pid_t *ret_pids, int *ret_modules)
{
	for (;;) {
		static struct ipc_dev_status devs[IPC_DEVICES_MAX];
		struct ipc_status st;
		bool ok = false;

		if (status(s, &st, devs) == 0 && st.ndevices == DEVICES) {
			ok = true;
			for (uint32_t i = 0; i < DEVICES; i++) {
				const struct ipc_dev_status d = devs[i];

				ok = ok && d.state == GPUX_DEVICE_READY;
				if (ret_pids)
					ret_pids[i] = (pid_t)d.pid;
				if (ret_modules)
					ret_modules[i] = (int)d.stats.modules_loaded;
			}
		}
		if (ok || soak_now() > until)
			return ok;
		(void)usleep(TICK_US);
	}
}

/* gpux's entries in /dev/shm (it should have none: its shared memory is memfds). */
static int count_shm(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strstr(e->d_name, "gpux") != NULL;
	(void)closedir(d);
	return n;
}

static bool snapshot(struct soak *s, struct snapshot *ret)
{
	pid_t pids[DEVICES];
	int mods[DEVICES];

	if (!all_ready(s, soak_now() + SETTLE_NS, pids, mods))
		return false;
	ret->pid[0] = s->sup;
	ret->modules[0] = 0;
	for (unsigned i = 0; i < DEVICES; i++) {
		ret->pid[1 + i] = pids[i];
		ret->modules[1 + i] = mods[i];
	}
	/* gpuxd may not have closed the status query's connection yet: the least of a few. */
	for (unsigned i = 0; i <= DEVICES; i++) {
		ret->fds[i] = INT_MAX;
		for (unsigned k = 0; k < 10; k++, (void)usleep(TICK_US))
			ret->fds[i] = MIN(ret->fds[i], proc_fd_count(ret->pid[i]));
		/* A loaded host module keeps its memfd: counted apart, against modules_loaded. */
		ret->memfds[i] = soak_count_memfds(ret->pid[i], "gpux-host-module");
		ret->rss[i] = soak_rss_kib(ret->pid[i]);
	}
	ret->shm = count_shm();
	return true;
}

/* Every client at rest and gone from the workers, the device cache's entries expired. */
static bool settle(struct soak *s)
{
	uint64_t until = soak_now() + SETTLE_NS;

	for (;;) {
		static struct ipc_dev_status devs[IPC_DEVICES_MAX];
		struct ipc_status st;
		bool idle = status(s, &st, devs) == 0;

		for (uint32_t i = 0; idle && i < st.ndevices; i++) {
			const struct ipc_dev_status d = devs[i];

			idle = d.stats.clients == 0 && d.stats.inflight == 0 &&
			       d.stats.cache_entries == 0 && d.stats.segments == 0 &&
			       d.stats.dbuf_bytes == 0;
		}
		if (idle)
			return true;
		if (soak_now() > until)
			return false;
		(void)usleep(100000);
	}
}

static pid_t client_start(struct soak *s, unsigned slot, unsigned budget, bool long_lived)
{
	uint64_t seed = rnd(s);
	pid_t pid = fork();

	if (pid == 0) {
		/* Its own process group: the watchdog takes its children with it. */
		(void)setpgid(0, 0);
		_exit(soak_client(s->b, slot, seed, budget, long_lived));
	}
	if (pid > 0) {
		(void)setpgid(pid, pid);
		atomic_store(&s->b->slots[slot].pid, pid);
		atomic_store(&s->b->slots[slot].op_start, 0);
		s->clients++;
	}
	return pid;
}

/* Where a hung client waits, for the report. */
static void describe_hang(pid_t pid, int op, uint64_t ns)
{
	char path[64], wchan[64] = "?";
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "re");
	if (f) {
		if (!fgets(wchan, sizeof(wchan), f))
			(void)snprintf(wchan, sizeof(wchan), "?");
		(void)fclose(f);
	}
	(void)fprintf(stderr, "gpux soak: client %d hung in \"%s\" for %.1f s (waiting in %s)\n",
		      (int)pid, soak_op_names[op], (double)ns / 1e9, wchan);
}

static void watchdog(struct soak *s)
{
	for (unsigned i = 0; i < s->nclients; i++) {
		struct soak_slot *sl = &s->b->slots[i];
		pid_t pid = atomic_load(&sl->pid);
		uint64_t t0 = atomic_load(&sl->op_start), now = soak_now();

		if (pid > 0 && t0 && t0 < now && now - t0 > s->watchdog_ns) {
			describe_hang(pid, atomic_load(&sl->op), now - t0);
			s->hangs++;
			atomic_store(&sl->op_start, 0);
			(void)kill(-pid, SIGKILL);
		}
	}
}

/* Take what ended: clients (started again while the run lasts), gpuxd, orphans. */
static void reap(struct soak *s, bool running)
{
	int st;
	pid_t pid;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		if (pid == s->sup) {
			s->sup = 0;
			if (!s->sup_down_until) {
				s->sup_deaths++;
				(void)fprintf(stderr, "gpux soak: gpuxd died by itself (%#x)\n",
					      st);
			}
			continue;
		}
		for (unsigned i = 0; i < s->nclients; i++) {
			if (atomic_load(&s->b->slots[i].pid) != pid)
				continue;
			atomic_store(&s->b->slots[i].pid, 0);
			if (!WIFEXITED(st) && !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
				s->b->crashes++;
				(void)fprintf(stderr, "gpux soak: client %d ended with %#x\n",
					      (int)pid, st);
			}
			if (running)
				(void)client_start(s, i, i == 0 ? 0 : 20 + rnd(s) % 200, i == 0);
		}
		/* Anything else is an orphan (a dead gpuxd's worker): reaped, nothing more. */
	}
}

/* Kill a worker (each device at most every WORKER_KILL_GAP_NS) or, now and then, gpuxd. */
static void kill_something(struct soak *s)
{
	uint64_t now = soak_now();
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;
	unsigned dev = (unsigned)(rnd(s) % DEVICES);

	s->next_kill = now + (2000 + rnd(s) % 4000) * NSEC_PER_MSEC;
	if (!s->sup)
		return;
	if (now >= s->next_sup_kill) {
		(void)kill(s->sup, SIGKILL);
		s->sup_kills++;
		s->sup_down_until = now + (100 + rnd(s) % SUP_DOWN_MAX_MS) * NSEC_PER_MSEC;
		s->next_sup_kill = now + (30000 + rnd(s) % 30000) * NSEC_PER_MSEC;
		return;
	}
	if (status(s, &st, devs) < 0 || dev >= st.ndevices ||
	    !soak_death_take(s->b, dev, SOAK_DEATH_GAP_NS))
		return;
	{
		const struct ipc_dev_status d = devs[dev];

		if (d.state != GPUX_DEVICE_READY || d.pid == 0)
			return;
		(void)kill((pid_t)d.pid, SIGKILL);
	}
	s->worker_kills++;
}

static void run(struct soak *s, uint64_t ns)
{
	uint64_t start = soak_now(), end = start + ns, quiet = end - ns * QUIET_PERCENT / 100;

	s->next_kill = start + 2 * NSEC_PER_SEC;
	s->next_sup_kill = start + 20 * NSEC_PER_SEC;
	for (unsigned i = 0; i < s->nclients; i++)
		(void)client_start(s, i, i == 0 ? 0 : 20 + rnd(s) % 200, i == 0);
	while (soak_now() < end) {
		uint64_t now = soak_now();

		reap(s, true);
		watchdog(s);
		if (!s->sup && now >= s->sup_down_until) {
			s->sup_down_until = 0;
			if (sup_start(s) < 0)
				(void)fprintf(stderr, "gpux soak: gpuxd would not start again\n");
		}
		if (now >= quiet)
			atomic_store(&s->b->quiet, true);
		if (now >= s->next_kill && now < quiet)
			kill_something(s);
		(void)usleep(TICK_US);
	}
	atomic_store(&s->b->stop, true);
	for (uint64_t until = soak_now() + s->watchdog_ns + SETTLE_NS;;) {
		bool any = false;

		reap(s, false);
		watchdog(s);
		for (unsigned i = 0; i < s->nclients; i++)
			any = any || atomic_load(&s->b->slots[i].pid) > 0;
		if (!any || soak_now() > until)
			break;
		(void)usleep(TICK_US);
	}
}

/* Whether anything of the daemon is above its baseline; prints each line. */
static bool leaks(const struct soak *s, const struct snapshot *a, const struct snapshot *z)
{
	bool bad = a->shm != z->shm;

	printf("leaks: /dev/shm entries named gpux %d -> %d\n", a->shm, z->shm);
	for (unsigned i = 0; i <= DEVICES; i++) {
		/* Beyond the fds of modules loaded since (each may keep its memfd open). */
		bool fds = z->fds[i] - a->fds[i] > MAX(z->modules[i] - a->modules[i], 0);
		bool memfds = z->memfds[i] > a->memfds[i];
		bool rss = z->rss[i] > a->rss[i] + s->rss_slack_kib;

		printf("  %-9s fds %d -> %d (modules %d -> %d), memfd maps %d -> %d, RSS %llu -> "
		       "%llu KiB%s\n",
		       i ? (i == 1 ? "worker 0" : "worker 1") : "gpuxd", a->fds[i], z->fds[i],
		       a->modules[i], z->modules[i], a->memfds[i], z->memfds[i],
		       (unsigned long long)a->rss[i], (unsigned long long)z->rss[i],
		       fds || memfds || rss ? "  <- LEAK" : "");
		bad = bad || fds || memfds || rss;
	}
	return bad;
}

/* Reports of sanitizers (an ASan build) in gpuxd's and its workers' log. */
static unsigned sanitizer_reports(const char *log)
{
	static const char *const marks[] = { "AddressSanitizer", "LeakSanitizer",
					     "runtime error:" };
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(log, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		for (unsigned i = 0; i < ARRAY_SIZE(marks); i++)
			n += strstr(line, marks[i]) != NULL;
	(void)fclose(f);
	return n;
}

static int parse_ops(const char *list, unsigned *ret)
{
	char copy[128], *save = NULL;
	unsigned mask = 0;

	/* Cut short, the list would lose its last names without a word. */
	if (strlen(list) >= sizeof(copy))
		return -EINVAL;
	memcpy(copy, list, strlen(list) + 1);
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned i = 0;

		while (i < SOAK_OP_N && strcmp(t, soak_op_names[i]))
			i++;
		if (i == SOAK_OP_N)
			return -EINVAL;
		mask |= 1u << i;
	}
	if (!mask)
		return -EINVAL;
	*ret = mask;
	return 0;
}

/* A number of minutes: above 0, a week at most, decimals allowed; else a usage error. */
static double parse_minutes(const char *v)
{
	char *end;
	double m;

	errno = 0;
	m = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(m) || m <= 0 || m > 7 * 24 * 60)
		tool_usage_error(TOOL_USAGE_SOAK,
				 "soak: --minutes: bad value \"%s\" (above 0, "
				 "a week at most)",
				 v);
	return m;
}

/* The options into s, *ret_min and *ret_keep; a bad one is a usage error (exit 2). */
static void parse(int argc, char **argv, struct soak *s, double *ret_min, bool *ret_keep)
{
	static const struct option opts[] = {
		{ "minutes", required_argument, NULL, 'm' },
		{ "clients", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },
		{ "watchdog-s", required_argument, NULL, 'w' },
		{ "keep", no_argument, NULL, 'k' },
		{ "ops", required_argument, NULL, 'o' },
		{ "rss-slack-mib", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *u = TOOL_USAGE_SOAK;
	int c;

	while ((c = tool_getopt(argc, argv, opts, u)) >= 0) {
		if (c == 'm')
			*ret_min = parse_minutes(optarg);
		else if (c == 'c')
			s->nclients = (unsigned)tool_parse_u64("soak", u, "--clients", optarg, 1,
							       SOAK_CLIENTS_MAX);
		else if (c == 's')
			s->seed = tool_parse_u64("soak", u, "--seed", optarg, 0, UINT64_MAX);
		else if (c == 'w')
			s->watchdog_ns =
				tool_parse_u64("soak", u, "--watchdog-s", optarg, 1, 24 * 3600) *
				NSEC_PER_SEC;
		else if (c == 'k')
			*ret_keep = true;
		else if (c == 'r')
			s->rss_slack_kib =
				tool_parse_u64("soak", u, "--rss-slack-mib", optarg, 0, 1u << 20) *
				1024;
		else if (parse_ops(optarg, &s->b->ops_mask) < 0)
			tool_usage_error(u,
					 "soak: --ops: bad value \"%s\" (a comma-separated list "
					 "of run, queue, frozen, dbuf, module, fork, fault, hang)",
					 optarg);
	}
	if (optind != argc)
		tool_usage_error(u, "soak: unexpected argument \"%s\"", argv[optind]);
}

static uint64_t wrong(const struct soak_board *b)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < SOAK_OP_N; i++)
		n += b->wrong[i];
	return n;
}

static void summary(struct soak *s, double minutes)
{
	struct soak_board *b = s->b;
	uint64_t errors = 0;

	printf("gpux soak: %.1f min, %u client%s at a time (%llu started, %llu forks), seed %llu\n",
	       minutes, s->nclients, s->nclients == 1 ? "" : "s", (unsigned long long)s->clients,
	       (unsigned long long)b->forks, (unsigned long long)s->seed);
	printf("requests checked: %llu; wrong results: %llu; unexpected statuses: %llu; crashes: "
	       "%llu; hangs: %llu\n",
	       (unsigned long long)b->requests_ok, (unsigned long long)wrong(b),
	       (unsigned long long)b->unexpected, (unsigned long long)b->crashes,
	       (unsigned long long)s->hangs);
	printf("errors by status:");
	for (unsigned i = 1; i < SOAK_STATUS_N; i++) {
		if (!b->status[i])
			continue;
		printf(" %s %llu;", gpux_strerror(-(int)i), (unsigned long long)b->status[i]);
		errors += b->status[i];
	}
	printf("%s\n", errors ? "" : " none");
	printf("kills: %llu workers, %llu gpuxd (%llu deaths of gpuxd by itself)\n",
	       (unsigned long long)s->worker_kills, (unsigned long long)s->sup_kills,
	       (unsigned long long)s->sup_deaths);
	printf("operations (count, longest, wrong):");
	for (unsigned i = 0; i < SOAK_OP_N; i++)
		printf(" %s %llu %.0f ms %llu;", soak_op_names[i], (unsigned long long)b->ops[i],
		       tool_ms(b->max_ns[i]), (unsigned long long)b->wrong[i]);
	printf("\n");
	printf("faulting kernels (run, ended as expected):");
	for (unsigned i = 0; i < SOAK_FAULT_N; i++)
		printf(" %s %llu %llu;", soak_fault_names[i], (unsigned long long)b->faults[i],
		       (unsigned long long)b->faults_as_expected[i]);
	printf("\nhanging kernels: %llu, ended GPUX_E_TIMEOUT: %llu\n",
	       (unsigned long long)b->hangs, (unsigned long long)b->hangs_as_expected);
	if (atomic_load(&b->told))
		printf("first problem: %s\n", b->first_problem);
}

int tool_soak(int argc, char **argv)
{
	struct soak s = { .nclients = 6,
			  .watchdog_ns = 120 * NSEC_PER_SEC,
			  .rss_slack_kib = RSS_SLACK_MIB * 1024 };
	struct snapshot base, end;
	double minutes = 1;
	bool keep = false, bad;
	char cmd[PATH_MAX + 16];
	unsigned reports;

	s.seed = (uint64_t)time(NULL);
	s.b = mmap(NULL, sizeof(*s.b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s.b == MAP_FAILED)
		return tool_fail("soak", strerror(errno));
	s.b->ops_mask = (1u << SOAK_OP_N) - 1;
	parse(argc, argv, &s, &minutes, &keep);
	s.rng = s.seed;
	if (tool_daemon_path(s.gpuxd, sizeof(s.gpuxd)) < 0) {
		char why[sizeof(s.gpuxd) + 64];

		(void)snprintf(why, sizeof(why),
			       "no gpuxd at %s nor on the PATH (GPUX_DAEMON "
			       "names it)",
			       s.gpuxd);
		return tool_fail("soak", why);
	}
	(void)snprintf(s.dir, sizeof(s.dir), "/tmp/gpux-soak-XXXXXX");
	if (!mkdtemp(s.dir))
		return tool_fail("soak", strerror(errno));
	(void)snprintf(s.b->sock, sizeof(s.b->sock), "%s/gpuxd.sock", s.dir);
	(void)snprintf(s.log, sizeof(s.log), "%s/gpuxd.log", s.dir);
	/* gpuxd's workers are ours to reap when it is killed. */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	(void)setenv("GPUX_CACHE_DIR", s.dir, 1);

	if (sup_start(&s) < 0 || !all_ready(&s, soak_now() + SETTLE_NS, NULL, NULL))
		return tool_fail("soak", "gpuxd did not start");
	/* A few operations first, so that the baseline has the kernels compiled and loaded. */
	{
		pid_t pid = client_start(&s, 0, 3 * SOAK_OP_N, false);
		int st;

		(void)waitpid(pid, &st, 0);
		atomic_store(&s.b->slots[0].pid, 0);
		s.clients = 0;
	}
	if (!settle(&s) || !snapshot(&s, &base))
		return tool_fail("soak", "gpuxd did not settle after the warm-up");
	memset(s.b->ops, 0, sizeof(s.b->ops));
	memset(s.b->max_ns, 0, sizeof(s.b->max_ns));
	memset(s.b->status, 0, sizeof(s.b->status));
	memset(s.b->faults, 0, sizeof(s.b->faults));
	memset(s.b->faults_as_expected, 0, sizeof(s.b->faults_as_expected));
	s.b->hangs = s.b->hangs_as_expected = 0;
	s.b->requests_ok = 0;
	s.b->forks = 0;

	run(&s, (uint64_t)(minutes * 60 * 1e9));
	bad = !settle(&s);
	if (bad)
		printf("gpux soak: the workers never came back to rest\n");
	bad = !snapshot(&s, &end) || bad;
	summary(&s, minutes);
	bad = leaks(&s, &base, &end) || bad;
	printf("  client    fds %+d, memfd maps %+d after disconnecting%s\n",
	       atomic_load(&s.b->client_fd_leak), atomic_load(&s.b->client_memfd_leak),
	       atomic_load(&s.b->client_checked) ? "" : " (not checked: it did not finish)");
	bad = bad || wrong(s.b) || s.b->unexpected || s.b->crashes || s.hangs || s.sup_deaths ||
	      atomic_load(&s.b->client_fd_leak) || atomic_load(&s.b->client_memfd_leak) ||
	      !atomic_load(&s.b->client_checked);
	if (s.sup > 0) {
		(void)kill(s.sup, SIGTERM);
		(void)waitpid(s.sup, NULL, 0);
	}
	reports = sanitizer_reports(s.log);
	printf("sanitizer reports in gpuxd's log: %u\n", reports);
	bad = bad || reports;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	if (keep || bad) {
		printf("gpux soak: gpuxd's log is in %s\n", s.log);
	} else {
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", s.dir);
		(void)system(cmd);
	}
	printf("gpux soak: %s\n", bad ? "FAILED" : "passed");
	return bad ? TOOL_FAIL : TOOL_OK;
}
