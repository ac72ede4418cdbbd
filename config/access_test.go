package config

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// routeWith is minimal with one more route whose body is body.
func routeWith(prefix, body string) string {
	return minimal + "route \"" + prefix + "\" {\n" + body + "\n}\n"
}

func TestAccessRules(t *testing.T) {
	src := routeWith("/admin/", `  access = ["deny 10.1.2.3", "allow 10.0.0.0/8", "allow ::1", "deny all"]
  respond {}`)
	cfg := mustParse(t, src)
	got := cfg.Routes[1].Access
	want := []AccessRule{
		{Allow: false, Prefix: netip.MustParsePrefix("10.1.2.3/32")},
		{Allow: true, Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		{Allow: true, Prefix: netip.MustParsePrefix("::1/128")},
		{Allow: false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Access = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", false}, {"10.1.2.4", true}, {"::ffff:10.9.9.9", true}, {"::1", true}, {"192.168.0.1", false}, {"::2", false},
	} {
		if a := netip.MustParseAddr(tc.addr); Admits(got, a) != tc.want {
			t.Errorf("Admits(%s) = %v, want %v", tc.addr, !tc.want, tc.want)
		}
	}
	if !Admits(nil, netip.MustParseAddr("1.2.3.4")) {
		t.Error("an empty list refuses an address")
	}
}

// Each access and slash_redirect mistake is an error at its file:line.
func TestAccessErrors(t *testing.T) {
	for _, tc := range []struct {
		body string
		want []string
	}{
		{`  access = ["allow 10.0.0.0/8"]`, []string{"file.hcl:9,", "Missing final access rule", `end it with "deny all"`}},
		{`  access = ["deny all", "allow 10.0.0.1"]`, []string{"file.hcl:9,25-", "Unreachable access rule", "never reached"}},
		{`  access = ["permit 10.0.0.1", "deny all"]`, []string{"file.hcl:9,13-", `"allow ADDRESS" or "deny ADDRESS"`}},
		{`  access = ["allow 10.0.0.300", "deny all"]`, []string{"file.hcl:9,13-", `"10.0.0.300" is not an IP address`}},
		{`  access = []`, []string{"file.hcl:9,", "leave it out to admit every address"}},
		{`  slash_redirect = true`, []string{"file.hcl:9,", "slash_redirect", `needs a prefix that ends in "/"`}},
	} {
		src := routeWith("/admin", tc.body+"\n  respond {}")
		_, err := parse(t, src)
		wantError(t, src, err, tc.want...)
	}
}

func TestRedirectHandler(t *testing.T) {
	cfg := mustParse(t, routeWith("/old/", `  redirect {
    to = "https://example.com/new{rest}{query}"
    status = 308
  }`))
	if got, want := cfg.Routes[1].Redirect, (&Redirect{To: "https://example.com/new{rest}{query}", Status: 308}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Redirect = %+v, want %+v", got, want)
	}
	cfg = mustParse(t, routeWith("/x", `  redirect { to = "/y{path}" }`))
	if got := cfg.Routes[1].Redirect.Status; got != 302 {
		t.Errorf("default status = %d, want 302", got)
	}
	for _, tc := range []struct {
		body string
		want []string
	}{
		{"  redirect {\n    to = \"/y\"\n    status = 304\n  }", []string{"file.hcl:11,14-", "redirect.status is 301, 302, 303, 307 or 308"}},
		{`  redirect { to = "/y{host}" }`, []string{"file.hcl:9,", "only the placeholders {path}, {rest} and {query}"}},
		{`  redirect { to = "//evil.example{path}" }`, []string{"file.hcl:9,", `starting with one "/"`}},
		{`  redirect { to = "ftp://x{path}" }`, []string{"file.hcl:9,", "absolute http or https URL"}},
		{`  redirect { to = "/a b" }`, []string{"file.hcl:9,", "may not hold spaces"}},
		{`  respond { status = 301 }`, []string{"file.hcl:9,", "respond.status 301 needs a Location", "redirect {"}},
		{"  redirect { to = \"/y\" }\n  respond {}", []string{"file.hcl:9,", "Duplicate route handler"}},
	} {
		src := routeWith("/x", tc.body)
		_, err := parse(t, src)
		wantError(t, src, err, tc.want...)
	}
}

func TestProxyRewriteAndFallback(t *testing.T) {
	up := "upstream \"app\" { addresses = [\"127.0.0.1:9\"] }\n"
	for _, tc := range []struct{ attr, want string }{
		{"strip_prefix = true", "/"}, {`rewrite_prefix = "/v2/"`, "/v2/"}, {"", ""},
	} {
		cfg := mustParse(t, up+routeWith("/py/", "  proxy {\n    upstream = \"app\"\n    "+tc.attr+"\n  }"))
		if got := cfg.Routes[1].Proxy.RewritePrefix; got != tc.want {
			t.Errorf("%s: RewritePrefix = %q, want %q", tc.attr, got, tc.want)
		}
	}
	src := up + routeWith("/py/", "  proxy {\n    upstream = \"app\"\n    strip_prefix = true\n    rewrite_prefix = \"/a/\"\n  }")
	_, err := parse(t, src)
	wantError(t, src, err, "file.hcl:13,22-", "set one of them")
	src = up + routeWith("/py/", "  proxy {\n    upstream = \"app\"\n    rewrite_prefix = \"a/\"\n  }")
	_, err = parse(t, src)
	wantError(t, src, err, "file.hcl:12,22-", `rewrite_prefix is a path starting with "/"`)

	cfg := mustParse(t, routeWith("/app/", `  static {
    root = "www"
    fallback = "/index.html"
  }`))
	if got := cfg.Routes[1].Static.Fallback; got != "index.html" {
		t.Errorf("Fallback = %q, want index.html", got)
	}
	for _, f := range []string{"index.html", "/", "/../x", "/a//b", "/dir/"} {
		src := routeWith("/app/", "  static {\n    root = \"www\"\n    fallback = \""+f+"\"\n  }")
		_, err := parse(t, src)
		wantError(t, src, err, "file.hcl:11,16-", "static.fallback is the path of a file below the root")
	}
}

// authRoute is a host-checked file with a basic_auth route on file and a
// rate limit class "login".
func authRoute(file, extra string) string {
	return minimal + `rate_limit "login" {
  prefix = "/login"
  rate = 5
  per = "1m"
  burst = 5
}
route "/private/" {
  basic_auth {
    htpasswd = "` + file + `"
    realm = "staff"
` + extra + `  }
  respond {}
}
`
}

func TestBasicAuth(t *testing.T) {
	dir := readableTempDir(t)
	bin, err := exec.LookPath("htpasswd")
	if err != nil {
		t.Skip("htpasswd (apache2-utils) is not installed")
	}
	file := filepath.Join(dir, "users")
	for i, u := range []string{"alice", "bob"} {
		args := []string{"-bB", file, u, "pw-" + u}
		if i == 0 {
			args[0] = "-bcB"
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("htpasswd: %v\n%s", err, out)
		}
	}
	src := authRoute("users", "    fail_class = \"login\"\n")
	cfg, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Routes[1].BasicAuth
	if a.File != file || a.Realm != "staff" || a.FailClass != "login" || len(a.Users) != 2 || a.Users[1].Name != "bob" || !strings.HasPrefix(a.Users[1].Hash, "$2y$") {
		t.Fatalf("BasicAuth = %+v", a)
	}
	// A worker re-parses without reading the file and gets the users from
	// Hello.
	wcfg := mustParse(t, src)
	if wcfg.Routes[1].BasicAuth.Users != nil {
		t.Fatal("a parse without host checks read the htpasswd file")
	}
	if err := wcfg.SetHtpasswd(map[string][]HtpasswdUser{"/base/users": a.Users}); err != nil {
		t.Fatal(err)
	}
	if err := wcfg.SetHtpasswd(nil); err == nil || !strings.Contains(err.Error(), "no entries for htpasswd file") {
		t.Errorf("SetHtpasswd(nil) = %v", err)
	}

	// Without fail_class, the class of the prefix if any, else a warning.
	cfg, err = Parse([]byte(authRoute("users", "")), "file.hcl", ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Routes[1].BasicAuth.FailClass; got != "" || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "file.hcl:16,") || !strings.Contains(cfg.Warnings[0], "no rate_limit class throttles failed logins") {
		t.Errorf("FailClass %q, warnings %q", got, cfg.Warnings)
	}
}

// Every htpasswd problem is an error at the basic_auth.htpasswd line naming
// the htpasswd file's own line.
func TestBasicAuthErrors(t *testing.T) {
	dir := readableTempDir(t)
	const alice = "alice:$2y$05$mN5.uYQJUsUD5OFJckdoruDcyhW9v/6wvlDrY8dN5Xb/uTKzID1Sq"
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{alice, "carol:$apr1$9mwsYUNJ$gGsF4a1jXer/WceIlIC6E."}, `users:2: user "carol" has a MD5 (apr1) hash; only bcrypt is accepted: write it with ` + "`htpasswd -B`"},
		{[]string{"# staff", "dave:{SHA}lcsL/Sl3x2EpjZYk5LTUxyo5l0o="}, `users:2: user "dave" has a SHA-1 hash`},
		{[]string{"erin:plain"}, `users:1: user "erin" has a crypt(3) or plain text hash`},
		{[]string{alice, "", alice}, `users:3: user "alice" is already defined on line 1`},
		{[]string{"nocolon"}, "users:1: not a NAME:HASH line"},
		{[]string{"frank:$2y$05$short"}, `users:1: user "frank": the bcrypt hash is malformed`},
		{[]string{"# nobody"}, "users: no users"},
	} {
		path := filepath.Join(dir, "users")
		if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		src := authRoute("users", "")
		err := hostParse(dir, src)
		wantError(t, src, err, "file.hcl:16,16-", "Invalid htpasswd file", tc.want)
	}
	src := authRoute("missing", "")
	wantError(t, src, hostParse(dir, src), "file.hcl:16,", "Unreadable htpasswd file", "no such file")
	src = authRoute("users", "    fail_class = \"nope\"\n")
	os.WriteFile(filepath.Join(dir, "users"), []byte(alice+"\n"), 0o644)
	wantError(t, src, hostParse(dir, src), "file.hcl:18,", `basic_auth.fail_class "nope" names no rate_limit block`)
	src = strings.Replace(authRoute("users", ""), `"staff"`, `"a\"b"`, 1)
	wantError(t, src, hostParse(dir, src), "file.hcl:17,", "basic_auth.realm is a non-empty text without quotes")

	// Over the Hello budget.
	var many []string
	for i := 0; i < 600; i++ {
		many = append(many, strings.Replace(alice, "alice", "user"+strings.Repeat("x", 3)+string(rune('a'+i%26))+string(rune('a'+i/26)), 1))
	}
	os.WriteFile(filepath.Join(dir, "users"), []byte(strings.Join(many, "\n")), 0o644)
	src = authRoute("users", "")
	wantError(t, src, hostParse(dir, src), "file.hcl:16,", "Too many htpasswd entries", "over 32768 bytes")
}
