package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// nobodyID is the conventional unprivileged uid and gid (the kernel's
// overflow id).
const nobodyID = 65534

// lookupUser resolves Policy.User to a uid and gid without cgo: "" is
// nobody, "uid" or "uid:gid" are numeric, anything else is looked up in
// /etc/passwd (primary group). It must run before chroot.
func lookupUser(name string) (uid, gid int, err error) {
	if name == "" {
		return nobodyID, nobodyID, nil
	}
	if u, g, ok := strings.Cut(name, ":"); ok {
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return 0, 0, fmt.Errorf("sandbox: invalid user %q (want NAME, UID or UID:GID)", name)
		}
		return uid, gid, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, n, nil
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox: looking up user %q: %w", name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 || fields[0] != name {
			continue
		}
		uid, err1 := strconv.Atoi(fields[2])
		gid, err2 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("sandbox: malformed /etc/passwd entry for %q", name)
		}
		return uid, gid, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("sandbox: reading /etc/passwd: %w", err)
	}
	return 0, 0, fmt.Errorf("sandbox: user %q not found in /etc/passwd", name)
}
