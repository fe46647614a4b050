/*
 * core_brace.c - brace expansion against what bash prints for the same
 * pattern (the expected lists below are `echo PATTERN` in bash 5).
 */
#include "core/core.h"
#include "tap.h"

static void expands(const char *pat, const char *want)
{
	gk_strlist l = {0};
	gk_err err = {0};
	char got[4096] = "";
	if (gk_brace_expand(pat, 0, &l, &err) < 0) {
		snprintf(got, sizeof(got), "error: %s", err.msg);
	} else {
		for (size_t i = 0; i < l.n; i++) {
			if (i)
				strcat(got, " ");
			strncat(got, l.v[i], sizeof(got) - strlen(got) - 2);
		}
	}
	is_str(got, want, pat);
	gk_strlist_free(&l);
}

static void hosts(const char *list, const char *want)
{
	gk_strlist l = {0};
	gk_err err = {0};
	char got[4096] = "";
	if (gk_hostlist_expand(list, 0, &l, &err) < 0) {
		snprintf(got, sizeof(got), "error: %s", err.msg);
		ok(l.n == 0, "failed host list adds nothing: %s", list);
	} else {
		for (size_t i = 0; i < l.n; i++) {
			if (i)
				strcat(got, " ");
			strncat(got, l.v[i], sizeof(got) - strlen(got) - 2);
		}
	}
	is_str(got, want, list);
	gk_strlist_free(&l);
}

static void refuses(const char *pat, size_t max, const char *want)
{
	gk_strlist l = {0};
	gk_err err = {0};
	int rc = gk_brace_expand(pat, max, &l, &err);
	ok(rc == -1 && l.n == 0, "refused: %s", pat);
	is_str(err.msg, want, "  message");
	gk_strlist_free(&l);
}

int main(void)
{
	expands("train.tar", "train.tar");
	expands("train-{000000..000003}.tar",
		"train-000000.tar train-000001.tar train-000002.tar train-000003.tar");
	expands("s-{0..3}", "s-0 s-1 s-2 s-3");
	expands("s-{8..11}", "s-8 s-9 s-10 s-11");
	expands("s-{08..11}", "s-08 s-09 s-10 s-11");
	expands("s-{3..0}", "s-3 s-2 s-1 s-0");
	expands("{0..10..5}", "0 5 10");
	expands("{10..0..-5}", "10 5 0");
	expands("{-2..2}", "-2 -1 0 1 2");
	expands("{a..e}", "a b c d e");
	expands("{e..c}", "e d c");
	expands("{train,val}.tar", "train.tar val.tar");
	expands("{train,val}-{0..1}.tar", "train-0.tar train-1.tar val-0.tar val-1.tar");
	expands("x{a,b{1,2}}y", "xay xb1y xb2y");
	expands("{a,}", "a ");
	expands("{}", "{}");
	expands("{x}", "{x}");
	expands("{x}-{1,2}", "{x}-1 {x}-2");
	expands("\\{a,b\\}", "{a,b}");
	expands("a\\,b", "a,b");
	expands("{1..1}", "1");
	expands("{a..b..x}", "{a..b..x}");
	expands("/data/{000000..000001}.tar.lz4", "/data/000000.tar.lz4 /data/000001.tar.lz4");
	refuses("train-{0..3.tar", 0, "brace pattern 'train-{0..3.tar': unmatched '{'");
	refuses("train-0..3}.tar", 0, "brace pattern 'train-0..3}.tar': unmatched '}'");
	refuses("{0..99}", 10, "brace range '{0..99}': more than 10 names");
	refuses("{0..3}{0..3}", 10, "brace pattern: more than 10 names");
	refuses("{0..999999999999999999999}", 0,
		"brace range '{0..999999999999999999999}': number too large");

	/* Host lists: braces, and Slurm's brackets as `scontrol show hostnames` prints them. */
	hosts("a,b", "a b");
	hosts("node{01..03}", "node01 node02 node03");
	hosts("node[01-04,07]", "node01 node02 node03 node04 node07");
	hosts("node[5]", "node5");
	hosts("gpu[1-2]-ib,login1", "gpu1-ib gpu2-ib login1");
	hosts("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
	hosts("n[08-10],x{a,b}", "n08 n09 n10 xa xb");
	hosts("a,,b", "error: host list 'a,,b': empty host name");
	hosts("a,b,a", "error: host list 'a,b,a': host 'a' is named twice (host names ignore case)");
	hosts("NODE1,node1", "error: host list 'NODE1,node1': host 'node1' is named twice (host names ignore case)");
	hosts("n[1-3],n2", "error: host list 'n[1-3],n2': host 'n2' is named twice (host names ignore case)");
	hosts("n{1,1}", "error: host list 'n{1,1}': host 'n1' is named twice (host names ignore case)");
	hosts("node[01-04", "error: host list 'node[01-04': unmatched '['");
	hosts("node[]", "error: host list 'node[]': empty '[]'");
	hosts("node[1-]", "error: host list 'node[1-]': empty range in brackets");
	/* Slurm refuses a range that runs backwards and letters in brackets */
	hosts("node[5-1]", "error: host list 'node[5-1]': range '5-1' runs backwards");
	hosts("node[1-1]", "node1");
	hosts("node[09-10]", "node09 node10");
	hosts("node[a-c]", "error: host list 'node[a-c]': 'a-c' in brackets: not a "
	      "number or a range of numbers");
	hosts("n[1,{2,3}]", "error: host list 'n[1,{2,3}]': '{2' in brackets: not a "
	      "number or a range of numbers");
	hosts("n[1-99999999999999999999]", "error: host list "
	      "'n[1-99999999999999999999]': range '1-99999999999999999999': number "
	      "too large");
	/* brace ranges follow bash, which counts down */
	hosts("node{3..1}", "node3 node2 node1");
	/* RFC 1123 names: nothing that would split or extend a rankfile line */
	hosts("a b", "error: host list: character 0x20 at offset 1: host names are "
	      "letters, digits, '-' and '.'");
	hosts("a\nrank 9=evil slot=0", "error: host list: character 0x0a at offset 1: "
	      "host names are letters, digits, '-' and '.'");
	hosts("a\tb", "error: host list: character 0x09 at offset 1: host names are "
	      "letters, digits, '-' and '.'");
	hosts("n\xc3\xa9", "error: host list: character 0xc3 at offset 1: host names "
	      "are letters, digits, '-' and '.'");
	hosts("gpu1.cluster.example.org,10-node", "gpu1.cluster.example.org 10-node");
	hosts("a_b", "error: host list 'a_b': host name 'a_b': '_' is not a letter, "
	      "digit, '-' or '.'");
	hosts("n=1", "error: host list 'n=1': host name 'n=1': '=' is not a letter, "
	      "digit, '-' or '.'");
	hosts("-n", "error: host list '-n': host name '-n': a label beginning or "
	      "ending with '-'");
	hosts("n-.x", "error: host list 'n-.x': host name 'n-.x': a label beginning "
	      "or ending with '-'");
	hosts("a..b", "error: host list 'a..b': host name 'a..b': an empty label (two "
	      "dots, or a dot at an end)");
	hosts("a.", "error: host list 'a.': host name 'a.': an empty label (two dots, "
	      "or a dot at an end)");
	hosts("x{a,_}", "error: host list 'x{a,_}': host name 'x_': '_' is not a "
	      "letter, digit, '-' or '.'");
	{
		char l63[64], l64[65], l253[254], l254[255], want[600];
		memset(l63, 'a', 63), l63[63] = 0;
		memset(l64, 'a', 64), l64[64] = 0;
		hosts(l63, l63);
		snprintf(want, sizeof(want), "error: host list '%s': host name '%s': "
			 "a label longer than 63 characters", l64, l64);
		hosts(l64, want);
		/* 4 labels: 63.63.63.61 = 253 characters; one more is too long */
		snprintf(l253, sizeof(l253), "%s.%s.%s.%.61s", l63, l63, l63, l63);
		hosts(l253, l253);
		snprintf(l254, sizeof(l254), "%s.%s.%s.%.62s", l63, l63, l63, l63);
		snprintf(want, sizeof(want), "error: host list '%s': host name '%s': "
			 "longer than 253 characters", l254, l254);
		hosts(l254, want);
	}

	/* A failed expansion leaves what the list held before untouched. */
	gk_strlist l = {0};
	gk_err err;
	gk_brace_expand("keep", 0, &l, &err);
	gk_brace_expand("{0..5}", 3, &l, &err);
	ok(l.n == 1 && strcmp(l.v[0], "keep") == 0 && l.v[1] == NULL,
	   "failed expansion leaves the list as it was");
	gk_strlist_free(&l);
	return done_testing();
}
