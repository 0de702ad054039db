/* SPDX-License-Identifier: MIT */
/* tools/bench-plot.c: gpux bench --plot and --from: a run as an SVG chart, a saved run read back. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "macro.h"

/*
 * The chart reads the rows by their names, whatever scenarios made them, so that a scenario
 * added later shows without a change here:
 * - launch rates (unit k/s) against a count at the start of the name: "N client processes,
 *   WHAT" and "N processes WHAT" are gpux's (a series per WHAT), "CuPy: N processes" CuPy's
 *   and "in-process: N threads" in-process CUDA's, from the baseline column; another
 *   "in-process:" rate is a line across (a ceiling), and so is a target ">= X k/s" of
 *   gpux's rows where targets are judged (CUDA);
 * - round trips (unit us) named "WHAT, pNN": a group of bars per WHAT, gpux and its baseline
 *   side by side for each percentile, on a logarithmic scale (a p99 is often ten times the
 *   p50).
 */

#define SERIES_MAX 16
#define POINTS_MAX 32
#define LINES_MAX 8
#define GROUPS_MAX 6
#define PCTS_MAX 4

struct series {
	char label[96];
	const char *color;
	bool dashed;
	unsigned n;
	double x[POINTS_MAX], y[POINTS_MAX];
};

struct hline {
	char label[96];
	const char *color;
	double y;
};

struct group {
	char label[64], base_label[32];
	unsigned n;
	char pct[PCTS_MAX][8];
	double gpux[PCTS_MAX], base[PCTS_MAX];
};

struct chart {
	struct series s[SERIES_MAX];
	unsigned ns;
	struct hline h[LINES_MAX];
	unsigned nh;
	struct group g[GROUPS_MAX];
	unsigned ng;
};

static const char *const gpux_colors[] = { "#1f60c4", "#17a2b8", "#2e8b57",
					   "#6f42c1", "#20c997", "#0d3b66" };
#define GPUX_COLOR "#1f60c4"
#define BASE_COLOR "#8e9aa0"

/* s without its leading blanks. */
static const char *trim(const char *s)
{
	while (*s == ' ')
		s++;
	return s;
}

/* A count at the start of s, then `word` (" client process"): the count, and in *ret_rest
 * what follows the word, its plural ending and ", " or " ". 0 when s is not so. */
static unsigned count_then(const char *s, const char *word, const char **ret_rest)
{
	char *end;
	unsigned long n;

	if (!isdigit((unsigned char)*s))
		return 0;
	n = strtoul(s, &end, 10);
	if (n == 0 || n > 1000000 || strncmp(end, word, strlen(word)) != 0)
		return 0;
	end += strlen(word);
	if (strncmp(end, "es", 2) == 0)
		end += 2;
	else if (*end == 's')
		end++;
	if (strncmp(end, ", ", 2) == 0)
		end += 2;
	else if (*end == ' ')
		end++;
	*ret_rest = end;
	return (unsigned)n;
}

static struct series *series_get(struct chart *c, const char *label, const char *color)
{
	for (unsigned i = 0; i < c->ns; i++)
		if (strcmp(c->s[i].label, label) == 0)
			return &c->s[i];
	if (c->ns == SERIES_MAX)
		return NULL;
	c->s[c->ns] = (struct series){ .color = color };
	(void)snprintf(c->s[c->ns].label, sizeof(c->s[c->ns].label), "%s", label);
	return &c->s[c->ns++];
}

static void series_add(struct series *s, double x, double y)
{
	if (s && s->n < POINTS_MAX && isfinite(y) && y > 0) {
		s->x[s->n] = x;
		s->y[s->n] = y / 1e3; /* k/s to M/s */
		s->n++;
	}
}

static void hline_add(struct chart *c, const char *label, const char *color, double y)
{
	for (unsigned i = 0; i < c->nh; i++)
		if (strcmp(c->h[i].label, label) == 0)
			return;
	if (c->nh == LINES_MAX || !isfinite(y) || y <= 0)
		return;
	c->h[c->nh] = (struct hline){ .color = color, .y = y / 1e3 };
	(void)snprintf(c->h[c->nh].label, sizeof(c->h[c->nh].label), "%s", label);
	c->nh++;
}

/* An absolute target of a rate, ">= X k/s": X, else NAN. */
static double rate_target(const char *target)
{
	double k;
	int end = 0;

	if (sscanf(target, ">= %lf k/s%n", &k, &end) == 1 && end > 0 && !target[end])
		return k;
	return NAN;
}

static void rate_row(struct chart *c, const struct result *r, bool targets)
{
	const char *name = trim(r->name), *rest;
	char label[96];
	unsigned n;

	if ((n = count_then(name, " client process", &rest)) ||
	    (n = count_then(name, " process", &rest))) {
		unsigned which = 0;
		double k = rate_target(r->target);

		if (strcmp(rest, "async empty kernels") == 0)
			(void)snprintf(label, sizeof(label), "gpux");
		else
			(void)snprintf(label, sizeof(label), "gpux, %s", rest);
		while (which < c->ns && strcmp(c->s[which].label, label) != 0)
			which++;
		series_add(series_get(c, label, gpux_colors[which % ARRAY_SIZE(gpux_colors)]), n,
			   r->gpux);
		if (targets && isfinite(k)) {
			(void)snprintf(label, sizeof(label), "target: %s", r->target);
			hline_add(c, label, "#c0392b", k);
		}
	} else if (strncmp(name, "CuPy: ", 6) == 0 &&
		   (n = count_then(name + 6, " process", &rest))) {
		series_add(series_get(c, "CuPy, a process and context each", "#e67e22"), n,
			   r->base);
	} else if (strncmp(name, "in-process: ", 12) == 0) {
		n = count_then(name + 12, " thread", &rest);
		if (n) {
			struct series *s = series_get(c, "in-process CUDA, threads of one context",
						      BASE_COLOR);

			if (s)
				s->dashed = true;
			series_add(s, n, r->base);
		} else {
			(void)snprintf(label, sizeof(label), "%s", name);
			hline_add(c, label, BASE_COLOR, r->base);
		}
	}
}

static void rtt_row(struct chart *c, const struct result *r)
{
	const char *name = trim(r->name), *comma = strrchr(name, ',');
	struct group *g = NULL;
	size_t len;

	if (!comma || strncmp(comma, ", p", 3) != 0 || !isdigit((unsigned char)comma[3]) ||
	    strncmp(name, "in-process:", 11) == 0 || strncmp(name, "of it", 5) == 0 ||
	    (!(r->gpux > 0) && !(r->base > 0)))
		return;
	len = (size_t)(comma - name);
	for (unsigned i = 0; i < c->ng && !g; i++)
		if (strlen(c->g[i].label) == len && strncmp(c->g[i].label, name, len) == 0)
			g = &c->g[i];
	if (!g) {
		if (c->ng == GROUPS_MAX)
			return;
		g = &c->g[c->ng++];
		*g = (struct group){ .n = 0 };
		(void)snprintf(g->label, sizeof(g->label), "%.*s", (int)len, name);
		(void)snprintf(g->base_label, sizeof(g->base_label), "%s",
			       strstr(g->label, "beside") ? "alone" : "in-process CUDA");
	}
	if (g->n == PCTS_MAX)
		return;
	(void)snprintf(g->pct[g->n], sizeof(g->pct[g->n]), "%s", comma + 2);
	g->gpux[g->n] = r->gpux;
	g->base[g->n] = r->base;
	g->n++;
}

/* ---- the SVG ---- */

static void text(FILE *f, double x, double y, const char *anchor, unsigned size, const char *color,
		 const char *s)
{
	(void)fprintf(f,
		      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%u\" "
		      "fill=\"%s\">",
		      x, y, anchor, size, color);
	for (; *s; s++) {
		if (*s == '&')
			(void)fputs("&amp;", f);
		else if (*s == '<')
			(void)fputs("&lt;", f);
		else if (*s == '>')
			(void)fputs("&gt;", f);
		else if (*s == '"')
			(void)fputs("&quot;", f);
		else
			(void)fputc(*s, f);
	}
	(void)fputs("</text>\n", f);
}

static void frame(FILE *f, double x0, double y0, double w, double h, const char *title,
		  const char *ylabel)
{
	(void)fprintf(f,
		      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
		      "fill=\"none\" stroke=\"#444\"/>\n",
		      x0, y0, w, h);
	text(f, x0 + w / 2, y0 - 12, "middle", 15, "#222", title);
	(void)fprintf(f,
		      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" "
		      "fill=\"#444\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
		      x0 - 46, y0 + h / 2, x0 - 46, y0 + h / 2, ylabel);
}

static void grid_line(FILE *f, double x0, double w, double y, const char *label)
{
	(void)fprintf(f,
		      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
		      x0, y, x0 + w, y);
	text(f, x0 - 6, y + 4, "end", 11, "#444", label);
}

/* A step of 1, 2 or 5 times a power of ten, for about `ticks` ticks up to max. */
static double nice_step(double max, unsigned ticks)
{
	double raw = max / ticks, p = pow(10, floor(log10(raw))), m = raw / p;

	return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
}

static void legend_entry(FILE *f, double x, double y, const char *color, bool dashed, bool bar,
			 const char *label)
{
	if (bar)
		(void)fprintf(f,
			      "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" "
			      "fill=\"%s\"/>\n",
			      x, y - 9, color);
	else
		(void)fprintf(f,
			      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			      "stroke=\"%s\" stroke-width=\"2\"%s/>\n",
			      x, y - 4, x + 18, y - 4, color,
			      dashed ? " stroke-dasharray=\"5,3\"" : "");
	text(f, x + 24, y, "start", 11, "#222", label);
}

static void rates_panel(FILE *f, const struct chart *c, double x0, double y0, double w, double h)
{
	double xmax = 1, ymax = 0, step, top;
	unsigned lx2 = 1, shown = 0;
	char num[32];

	for (unsigned i = 0; i < c->ns; i++)
		for (unsigned k = 0; k < c->s[i].n; k++) {
			xmax = fmax(xmax, c->s[i].x[k]);
			ymax = fmax(ymax, c->s[i].y[k]);
		}
	for (unsigned i = 0; i < c->nh; i++)
		ymax = fmax(ymax, c->h[i].y);
	while ((double)(1u << lx2) < xmax)
		lx2++;
	frame(f, x0, y0, w, h, "Empty kernel launches per second, against clients",
	      "million launches/s");
	step = nice_step(fmax(ymax, 0.1) * 1.05, 6);
	top = ceil(fmax(ymax, 0.1) * 1.05 / step) * step;
	for (unsigned k = 0; k * step <= top * 1.0001; k++) {
		(void)snprintf(num, sizeof(num), "%g", k * step);
		grid_line(f, x0, w, y0 + h - k * step / top * h, num);
	}
	for (unsigned k = 0; k <= lx2; k++) {
		(void)snprintf(num, sizeof(num), "%u", 1u << k);
		text(f, x0 + (double)k / lx2 * w, y0 + h + 16, "middle", 11, "#444", num);
	}
	text(f, x0 + w / 2, y0 + h + 34, "middle", 12, "#444",
	     "client processes (in-process CUDA: threads)");
	for (unsigned i = 0; i < c->nh; i++) {
		double y = y0 + h - c->h[i].y / top * h;

		(void)fprintf(f,
			      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			      "stroke=\"%s\" stroke-dasharray=\"2,4\" stroke-width=\"1.5\"/>\n",
			      x0, y, x0 + w, y, c->h[i].color);
		text(f, x0 + w - 4, y - 4, "end", 10, c->h[i].color, c->h[i].label);
	}
	for (unsigned i = 0; i < c->ns; i++) {
		const struct series *s = &c->s[i];

		if (!s->n)
			continue;
		(void)fprintf(f,
			      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s "
			      "points=\"",
			      s->color, s->dashed ? " stroke-dasharray=\"5,3\"" : "");
		for (unsigned k = 0; k < s->n; k++)
			(void)fprintf(f, "%s%.1f,%.1f", k ? " " : "", x0 + log2(s->x[k]) / lx2 * w,
				      y0 + h - s->y[k] / top * h);
		(void)fputs("\"/>\n", f);
		for (unsigned k = 0; k < s->n; k++)
			(void)fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
				      x0 + log2(s->x[k]) / lx2 * w, y0 + h - s->y[k] / top * h,
				      s->color);
		legend_entry(f, x0 + 10, y0 + 18 + 16.0 * shown++, s->color, s->dashed, false,
			     s->label);
	}
	if (!shown)
		text(f, x0 + w / 2, y0 + h / 2, "middle", 13, "#888",
		     "no launch rates in this run (gpux bench --only clients)");
}

/* The height of v on a logarithmic axis from lo to hi, h high. */
static double log_y(double v, double lo, double hi, double h)
{
	return (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) * h;
}

static void rtt_panel(FILE *f, const struct chart *c, double x0, double y0, double w, double h)
{
	double lo = INFINITY, hi = 0, slot, bw;
	unsigned nslots = 0, k = 0;
	char num[32];

	for (unsigned i = 0; i < c->ng; i++) {
		nslots += c->g[i].n;
		for (unsigned j = 0; j < c->g[i].n; j++)
			for (unsigned b = 0; b < 2; b++) {
				double v = b ? c->g[i].base[j] : c->g[i].gpux[j];

				if (v > 0 && isfinite(v)) {
					lo = fmin(lo, v);
					hi = fmax(hi, v);
				}
			}
	}
	frame(f, x0, y0, w, h, "Round trips, by percentile", "microseconds (log scale)");
	if (!c->ng) {
		text(f, x0 + w / 2, y0 + h / 2, "middle", 13, "#888",
		     "no round trips in this run (--only rtt,fair)");
		return;
	}
	/* From the power of ten below the least to the one above the most. */
	lo = pow(10, floor(log10(lo)));
	hi = pow(10, ceil(log10(hi * 1.5)));
	for (double v = lo; v <= hi * 1.0001; v *= 10)
		for (unsigned m = 1; m < 10 && v * m <= hi * 1.0001; m = m == 1   ? 2
									 : m == 2 ? 5
										  : 10) {
			(void)snprintf(num, sizeof(num), "%g", v * m);
			grid_line(f, x0, w, y0 + h - log_y(v * m, lo, hi, h), num);
		}
	slot = w / (nslots + c->ng);
	bw = slot * 0.4;
	for (unsigned i = 0; i < c->ng; i++) {
		const struct group *g = &c->g[i];
		double left = x0 + slot * (k + i + 0.5), mid = left + slot * g->n / 2;
		char lbl[64];

		for (unsigned j = 0; j < g->n; j++, k++) {
			double x = x0 + slot * (k + i + 0.5) + slot * 0.1;
			const double v[2] = { g->gpux[j], g->base[j] };

			for (unsigned b = 0; b < 2; b++) {
				double bh;

				if (!(v[b] > 0) || !isfinite(v[b]))
					continue;
				bh = log_y(v[b], lo, hi, h);
				(void)fprintf(f,
					      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
					      "height=\"%.1f\" fill=\"%s\"/>\n",
					      x + b * bw, y0 + h - bh, bw * 0.92, bh,
					      b ? BASE_COLOR : GPUX_COLOR);
				(void)snprintf(num, sizeof(num), v[b] < 1000 ? "%.3g" : "%.0f",
					       v[b]);
				text(f, x + b * bw + bw / 2, y0 + h - bh - 3, "middle", 9, "#222",
				     num);
			}
			text(f, x + bw, y0 + h + 14, "middle", 11, "#444", g->pct[j]);
		}
		text(f, mid, y0 + h + 30, "middle", 11, "#222", g->label);
		(void)snprintf(lbl, sizeof(lbl), "grey: %s", g->base_label);
		text(f, mid, y0 + h + 44, "middle", 10, "#666", lbl);
	}
	legend_entry(f, x0, y0 + h + 66, GPUX_COLOR, false, true, "gpux");
	legend_entry(f, x0 + 80, y0 + h + 66, BASE_COLOR, false, true,
		     "its baseline (named above)");
}

int bench_plot(const struct bench *b, const char *device, const char *path)
{
	static struct chart c;
	char title[160];
	FILE *f;
	int r;

	memset(&c, 0, sizeof(c));
	for (unsigned i = 0; i < b->nres; i++) {
		if (strcmp(b->res[i].unit, "k/s") == 0)
			rate_row(&c, &b->res[i], b->cuda);
		else if (strcmp(b->res[i].unit, "us") == 0)
			rtt_row(&c, &b->res[i]);
	}
	if (!c.ns && !c.ng) {
		(void)fprintf(stderr, "gpux: bench: --plot: the run has neither launch rates nor "
				      "round trips (its scenarios clients, rtt, fair)\n");
		return -1;
	}
	f = fopen(path, "we");
	if (!f) {
		(void)fprintf(stderr, "gpux: bench: --plot: %s: %s\n", path, strerror(errno));
		return -1;
	}
	(void)fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"540\" "
		    "viewBox=\"0 0 1200 540\" font-family=\"sans-serif\">\n"
		    "<rect width=\"1200\" height=\"540\" fill=\"white\"/>\n",
		    f);
	(void)snprintf(title, sizeof(title), "gpux bench on %s (%s back end)", device,
		       b->cuda ? "CUDA" : "host");
	text(f, 600, 26, "middle", 17, "#111", title);
	rates_panel(f, &c, 80, 70, 640, 380);
	rtt_panel(f, &c, 840, 70, 330, 380);
	(void)fputs("</svg>\n", f);
	r = ferror(f);
	r |= fclose(f);
	if (r) {
		(void)fprintf(stderr, "gpux: bench: --plot: %s: cannot write it\n", path);
		return -1;
	}
	return 0;
}

/* ---- a saved run ---- */

static double real_or_nan(json_t *v)
{
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/*
 * The JSON document of a file: the whole of it, or from the first line that starts with "{"
 * (a log of gpux bench --json, its progress and table before the document).
 */
static json_t *load_doc(const char *path)
{
	json_error_t err = { .line = 0 };
	json_t *root = NULL;
	char *buf = NULL, chunk[65536];
	size_t len = 0, n;
	FILE *f = fopen(path, "re");

	if (!f) {
		(void)fprintf(stderr, "gpux: bench: --from %s: %s\n", path, strerror(errno));
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		char *more = realloc(buf, len + n);

		if (!more) {
			free(buf);
			(void)fclose(f);
			(void)fprintf(stderr, "gpux: bench: --from %s: out of memory\n", path);
			return NULL;
		}
		buf = more;
		memcpy(buf + len, chunk, n);
		len += n;
	}
	(void)fclose(f);
	for (size_t p = 0; p < len && !root; p++)
		if ((p == 0 || buf[p - 1] == '\n') && buf[p] == '{')
			root = json_loadb(buf + p, len - p, 0, &err);
	if (!root)
		(void)fprintf(stderr, "gpux: bench: --from %s: no JSON document in it%s%s\n", path,
			      err.text[0] ? ": " : "", err.text);
	free(buf);
	return root;
}

int bench_load(struct bench *b, const char *path, const char **ret_device, json_t **ret_keep)
{
	json_t *root = load_doc(path), *res;
	const char *backend;

	if (!root)
		return -1;
	res = json_object_get(root, "results");
	backend = json_string_value(json_object_get(root, "backend"));
	if (!json_is_array(res) || !backend ||
	    !json_string_value(json_object_get(root, "device"))) {
		(void)fprintf(stderr, "gpux: bench: --from %s: not the JSON of gpux bench --json\n",
			      path);
		json_decref(root);
		return -1;
	}
	b->cuda = strcmp(backend, "cuda") == 0;
	b->nres = 0;
	for (size_t i = 0; i < json_array_size(res) && b->nres < MAX_RESULTS; i++) {
		json_t *o = json_array_get(res, i);
		const char *name = json_string_value(json_object_get(o, "scenario"));
		const char *unit = json_string_value(json_object_get(o, "unit"));
		const char *target = json_string_value(json_object_get(o, "target"));
		struct result *r = &b->res[b->nres];

		if (!name || !unit || !target) {
			(void)fprintf(stderr,
				      "gpux: bench: --from %s: result %zu lacks a scenario, "
				      "unit or target\n",
				      path, i);
			json_decref(root);
			return -1;
		}
		(void)snprintf(r->name, sizeof(r->name), "%s", name);
		r->gpux = real_or_nan(json_object_get(o, "gpux"));
		r->base = real_or_nan(json_object_get(o, "baseline"));
		r->ratio = real_or_nan(json_object_get(o, "ratio"));
		r->unit = unit;
		r->target = target;
		r->met = json_is_true(json_object_get(o, "met"));
		b->nres++;
	}
	*ret_device = json_string_value(json_object_get(root, "device"));
	*ret_keep = root;
	return 0;
}
