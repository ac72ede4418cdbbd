// Package ctl is the body of gatehousectl: it sends one command to
// gatehouse's admin socket and prints the reply, as tables for people or as
// JSON for scripts.
package ctl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/gatehouse-dev/gatehouse/internal/expiry"
	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// Exit statuses.
const (
	ExitOK          = 0
	ExitReply       = 1 // gatehouse answered with an error
	ExitUsage       = 2 // invalid flags or command line
	ExitUnreachable = 3 // the admin socket could not be reached or answered nothing usable
)

// DefaultSocket is the admin socket used without -socket or
// GATEHOUSE_ADMIN_SOCKET.
const DefaultSocket = "/run/gatehouse/admin.sock"

// SocketEnv names the environment variable that overrides DefaultSocket.
const SocketEnv = "GATEHOUSE_ADMIN_SOCKET"

const (
	dialTimeout = 5 * time.Second
	// replyTimeout bounds the wait for a reply; reload gets longer, since
	// the supervisor validates the file and may bind listeners.
	replyTimeout  = 15 * time.Second
	reloadTimeout = 75 * time.Second
)

const usage = `usage: gatehousectl [-socket PATH] [-json] COMMAND [ARGS]
       gatehousectl -version

Commands:
  status            version, uptime, listeners, pool and every worker
  workers           every worker slot: pid, state, sandbox layers, load, restarts
  conns             connections by state
  clients [N|-N]    the N client keys holding the most slots (default 20)
  metrics           metrics in the Prometheus text format
  upstreams         every upstream: connections held, each address's state
  reload            read the configuration file again (as SIGHUP)
  drain             shut gatehouse down gracefully: stop accepting, close every
                    idle connection, give requests in flight shutdown_grace
                    (default 10s) to finish, cut the rest, exit 0
  upgrade [PATH]    start the binary at PATH (default: the one gatehouse was
                    started from; started as root, gatehouse refuses any other)
                    with the configuration read afresh, and hand it every
                    listener and connection; exits non-zero, and the running
                    version keeps serving, when the new one fails
  log-level LEVEL   trace, debug, info, warn or error

Flags may come before or after the command.
`

// Run runs gatehousectl with args (without the program name) and returns its
// exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("gatehousectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	socket := fs.String("socket", "", "admin socket `path` (default $"+SocketEnv+", else "+DefaultSocket+")")
	asJSON := fs.Bool("json", false, "print the reply as JSON")
	showVersion := fs.Bool("version", false, "print gatehousectl's version and exit (status shows the running gatehouse's)")
	// Flags may follow the command: parse, take one positional, repeat. A
	// negative number is an argument, not a flag: `clients -5` asks for the
	// top five, as `head -5` would.
	var pos []string
	rest := args
	for len(rest) > 0 {
		if isNegativeNumber(rest[0]) {
			pos = append(pos, rest[0])
			rest = rest[1:]
			continue
		}
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK
			}
			return ExitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if *showVersion {
		fmt.Fprintf(stdout, "gatehousectl %s\n", version.Version)
		return ExitOK
	}
	if len(pos) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	if pos[0] == adminapi.CmdClients && len(pos) > 1 && isNegativeNumber(pos[1]) {
		pos[1] = pos[1][1:]
	}
	path := *socket
	if path == "" {
		path = getenv(SocketEnv)
	}
	if path == "" {
		path = DefaultSocket
	}
	req := adminapi.Request{Command: pos[0], Args: pos[1:]}
	raw, reply, err := call(path, req)
	if err != nil {
		fmt.Fprintf(stderr, "gatehousectl: %v\n", err)
		return ExitUnreachable
	}
	if *asJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			buf.Reset()
			buf.Write(raw)
		}
		buf.WriteByte('\n')
		stdout.Write(buf.Bytes())
	} else if reply.OK {
		if err := printReply(stdout, req.Command, reply); err != nil {
			fmt.Fprintf(stderr, "gatehousectl: %v\n", err)
			return ExitReply
		}
	}
	if !reply.OK {
		fmt.Fprintf(stderr, "gatehousectl: %s: %s\n", req.Command, reply.Error)
		return ExitReply
	}
	return ExitOK
}

// isNegativeNumber reports whether s is "-" followed by decimal digits only.
func isNegativeNumber(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// call sends req on a new connection to the socket at path and returns the
// reply line and its decoding.
func call(path string, req adminapi.Request) ([]byte, adminapi.Reply, error) {
	var reply adminapi.Reply
	c, err := net.DialTimeout("unix", path, dialTimeout)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, reply, fmt.Errorf("nothing answers on gatehouse's admin socket %s: gatehouse is not running "+
			"(the file is left by one that stopped without the right to remove it, and replaced when gatehouse starts)", path)
	}
	if err != nil {
		return nil, reply, fmt.Errorf("cannot reach gatehouse's admin socket: %w "+
			"(is gatehouse running with an admin { socket = ... } block, and are you root or its user? Use -socket or $%s.)", err, SocketEnv)
	}
	defer c.Close()
	limit := replyTimeout
	if req.Command == adminapi.CmdReload || req.Command == adminapi.CmdUpgrade {
		limit = reloadTimeout
	}
	c.SetDeadline(time.Now().Add(limit))
	line, err := json.Marshal(req)
	if err != nil {
		return nil, reply, err
	}
	// A write error is not the end: gatehouse refuses a peer (another uid,
	// too many connections) by replying and closing before it reads, so
	// the reply may be waiting even though the request could not be sent.
	_, werr := c.Write(append(line, '\n'))
	raw, err := bufio.NewReader(c).ReadBytes('\n')
	if len(raw) == 0 && err != nil {
		if werr != nil {
			return nil, reply, fmt.Errorf("sending to %s: %w", path, werr)
		}
		return nil, reply, fmt.Errorf("no reply from %s: %w", path, err)
	}
	raw = bytes.TrimRight(raw, "\n")
	if err := json.Unmarshal(raw, &reply); err != nil {
		return nil, reply, fmt.Errorf("unreadable reply from %s: %w", path, err)
	}
	return raw, reply, nil
}

// printReply writes a successful reply for people.
func printReply(w io.Writer, cmd string, r adminapi.Reply) error {
	switch {
	case r.Status != nil:
		return printStatus(w, r.Status)
	case cmd == adminapi.CmdWorkers:
		return printWorkers(w, r.Workers)
	case r.Conns != nil:
		return printConns(w, r.Conns)
	case cmd == adminapi.CmdClients:
		return printClients(w, r.Clients)
	case cmd == adminapi.CmdUpstreams:
		return printUpstreams(w, r.Upstreams)
	case cmd == adminapi.CmdMetrics:
		_, err := io.WriteString(w, r.Metrics)
		return err
	case r.Message != "":
		_, err := fmt.Fprintln(w, r.Message)
		return err
	}
	_, err := fmt.Fprintln(w, "ok")
	return err
}

func printStatus(w io.Writer, s *adminapi.Status) error {
	cfg := s.ConfigFile
	if cfg == "" {
		cfg = "(built-in)"
	}
	state := "serving"
	if s.Stopping {
		state = "stopping"
	}
	uptime := (time.Duration(s.UptimeSeconds) * time.Second).String()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "gatehouse\t%s, pid %d, %s, up %s\n", safe(s.Version), s.PID, state, uptime)
	fmt.Fprintf(tw, "config\t%s\n", safe(cfg))
	fmt.Fprintf(tw, "listeners\t%s\n", safeJoin(s.Listeners))
	fmt.Fprintf(tw, "pool\t%d slots, %d per client; %d at workers, %d waiting, %s\n",
		s.Pool, s.Share, s.AtWorkers, s.Waiting, firstRequests(s.Queued, s.InFirstRequest))
	fmt.Fprintf(tw, "worker deaths\t%s\n", deathSummary(s.WorkerDeaths))
	fmt.Fprintf(tw, "upgrade\t%s\n", upgradeSummary(s.Upgrade))
	p := s.Privileges
	caps := p.Capabilities
	if caps == "" {
		caps = "none"
	}
	fmt.Fprintf(tw, "privileges\teuid %d egid %d, capabilities %s (effective %s, bounding %s), no_new_privs %t\n",
		p.EUID, p.EGID, safe(caps), safe(p.CapEff), safe(p.CapBnd), p.NoNewPrivs)
	if p.Separation != "" {
		fmt.Fprintf(tw, "workers\t%s\n", safe(p.Separation))
	}
	if p.LauncherPID != 0 {
		fmt.Fprintf(tw, "launcher\tpid %d as root, starts only the binary at the path gatehouse was started from on an upgrade\n", p.LauncherPID)
	}
	mode := "normal"
	if s.Stress {
		mode = "stress"
	}
	fmt.Fprintf(tw, "admission\t%s: first byte within %s, head within %s; %d bytes of incomplete heads held\n",
		mode, secs(s.FirstByteTimeoutSeconds), secs(s.HeadTimeoutSeconds), s.HeadBytes)
	fmt.Fprintf(tw, "bodies\t%d connections receiving a body outside the pool, %d bytes charged\n", s.BodyConns, s.BodyBytes)
	fmt.Fprintf(tw, "streams\t%d streams and %d upgraded connections open of %d; refused for the budget: %d streams, %d upgrades\n",
		s.Streams, s.Upgrades, s.StreamsMax, s.StreamsRefused, s.UpgradesRefused)
	now := time.Now()
	for _, c := range s.Certificates {
		// "expires 2027-01-05 (in 34 days)", "EXPIRED 2026-11-01 (31 days ago)".
		when := expiry.Text(c.NotAfter, now)
		if now.After(c.NotAfter) {
			when = "EXPIRED" + strings.TrimPrefix(when, "expired")
		}
		fmt.Fprintf(tw, "certificate	%s/%s: %s; %s; loaded %s\n", safe(c.Listener), safe(c.Name), safeJoin(c.DNSNames),
			when, c.Loaded.UTC().Format(time.RFC3339))
	}
	for _, e := range s.CertificateErrors {
		kept := "the previous one is served"
		if !e.Kept {
			kept = "not served"
		}
		fmt.Fprintf(tw, "certificate\t%s/%s: RELOAD FAILED since %s (%s): %s\n", safe(e.Listener), safe(e.Name),
			e.Since.UTC().Format(time.RFC3339), kept, safe(e.Error))
	}
	if c := s.Cluster; c != nil {
		link := "up: rate limits and penalties shared"
		if !c.Up {
			link = "DOWN (" + safe(c.Error) + "): rate limits and penalties are this instance's own"
		}
		tickets := "per instance"
		if c.SharedTickets {
			tickets = "shared"
		}
		fmt.Fprintf(tw, "cluster	instance %s, store %s %s since %s; ticket keys %s\n", safe(c.Instance), safe(c.Address), link,
			c.Since.UTC().Format(time.RFC3339), tickets)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printWorkers(w, s.Workers)
}

// deathSummary is "none" or the total and its reasons: "3 (protocol 1,
// seccomp 2)".
func deathSummary(by map[string]uint64) string {
	var total uint64
	reasons := make([]string, 0, len(by))
	for r, n := range by {
		total += n
		reasons = append(reasons, r)
	}
	if total == 0 {
		return "none"
	}
	sort.Strings(reasons)
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%s %d", r, by[r]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func printWorkers(w io.Writer, ws []adminapi.Worker) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tPID\tSTATE\tTHREADS\tACTIVE\tSERVED\tRESTARTS\tBACKOFF\tSANDBOX")
	for _, x := range ws {
		pid := "-"
		if x.PID != 0 {
			pid = fmt.Sprint(x.PID)
		}
		backoff := "-"
		if x.BackoffSeconds > 0 {
			backoff = time.Duration(x.BackoffSeconds * float64(time.Second)).Round(time.Millisecond).String()
		}
		threads := "-"
		if x.Threads > 0 {
			threads = fmt.Sprint(x.Threads)
		}
		sandbox := safeJoin(x.Sandbox)
		if sandbox == "" {
			sandbox = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", x.Slot, pid, safe(x.State), threads, x.Active, x.Served, x.Restarts, backoff, sandbox)
	}
	return tw.Flush()
}

// connStates is the order conns prints states in; others follow by name.
var connStates = []string{"proxy", "fresh", "head", "waiting", "at_worker", "idle", "linger"}

func printConns(w io.Writer, c *adminapi.Conns) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tCONNECTIONS")
	seen := map[string]bool{}
	for _, st := range connStates {
		seen[st] = true
		fmt.Fprintf(tw, "%s\t%d\n", st, c.ByState[st])
	}
	var more []string
	for st := range c.ByState {
		if !seen[st] {
			more = append(more, st)
		}
	}
	sort.Strings(more)
	for _, st := range more {
		fmt.Fprintf(tw, "%s\t%d\n", safe(st), c.ByState[st])
	}
	fmt.Fprintf(tw, "total\t%d\n", c.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d pool slots at workers (%d per client), %d waiting for a slot, %s\n",
		c.AtWorkers, c.Pool, c.Share, c.Waiting, firstRequests(c.Queued, c.InFirstRequest))
	return err
}

// firstRequests says how many connections have not sent a first request
// (queued, max_queued_connections' count) and how many are at a worker in
// their first one (a long upload, an SSE stream), which hold no place of
// that cap once their head is seen.
func firstRequests(queued, inFirst int) string {
	return fmt.Sprintf("%d before a first request, %d in a first request", queued, inFirst)
}

func printClients(w io.Writer, cs []adminapi.Client) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tSLOTS\tCONNS\tWAITING\tWAITS\tBODIES\tDEATHS\tREFUSED\tTRUSTED")
	for _, c := range cs {
		trusted := ""
		if c.Trusted {
			trusted = "yes"
		}
		// REFUSED: the penalty left for having had connections at dying
		// workers too often.
		refused := "-"
		if c.PenaltySeconds > 0 {
			refused = "for " + time.Duration(c.PenaltySeconds*float64(time.Second)).Round(time.Second).String()
		}
		// BODIES: connections receiving a body outside the pool, and the
		// bytes they charge to the body budget.
		bodies := "-"
		if c.BodyConns > 0 {
			bodies = fmt.Sprintf("%d (%d B)", c.BodyConns, c.BodyBytes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", safe(c.Key), c.Out, c.Conns, c.Waiting, c.Waits, bodies, c.Deaths, refused, trusted)
	}
	return tw.Flush()
}

func printUpstreams(w io.Writer, us []adminapi.Upstream) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tADDRESS\tSTATE\tFAILS\tDIALS\tFAILURES\tLAST ERROR")
	for _, u := range us {
		for _, a := range u.Addresses {
			state := safe(a.State)
			if a.DownForSeconds > 0 {
				state += fmt.Sprintf(" (%s left)", time.Duration(a.DownForSeconds*float64(time.Second)).Round(time.Second))
			}
			lastErr := "-"
			if a.LastError != "" {
				lastErr = safe(a.LastError)
			}
			addr := safe(a.Address)
			if a.Host != "" {
				addr += " (" + safe(a.Host) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", safe(u.Name), addr, state, a.Fails, a.Dials, a.Failures, lastErr)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tHELD\tDIALING\tMAX\tPER WORKER\tWAITING\tRECLAIMS\tSHARE REFUSED")
	for _, u := range us {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", safe(u.Name), u.Held, u.Dialing, u.MaxConnections, u.Share, u.Waiting, u.Reclaims, u.ShareRefused)
	}
	return tw.Flush()
}

// safe returns s for a table cell: as it is when it holds only printable
// characters other than spaces and quotes, else Go-quoted. Many of the strings
// a reply holds come from workers (sandbox layer names) or clients, and none
// may move the cursor, recolour the terminal or pass for two cells.
func safe(s string) string {
	for _, r := range s {
		if r == ' ' || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// safeJoin joins the safe forms of ss with spaces.
func safeJoin(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = safe(s)
	}
	return strings.Join(out, " ")
}

// secs formats a number of seconds as a duration.
func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).String()
}

// upgradeSummary is the status's upgrade line: the hand-over under way, or
// what this process took over and how many upgrades failed.
func upgradeSummary(u adminapi.Upgrade) string {
	var out string
	switch {
	case u.Starting != "":
		out = "in progress: starting " + safe(u.Starting)
	case u.OldDraining:
		out = fmt.Sprintf("in progress: took over %d connections; the previous version (pid %d) still drains %d", u.Adopted, u.PeerPID, u.Staying)
	case u.HandingOver:
		out = fmt.Sprintf("in progress: handing over to %s (pid %d); %d connections handed over, %d still here (draining), %d closed here",
			safe(u.PeerVersion), u.PeerPID, u.HandedOver, u.Staying, u.Drained)
	case u.Adopted > 0:
		out = fmt.Sprintf("took over %d connections from the previous version", u.Adopted)
	default:
		out = "none in progress"
	}
	if u.Failed > 0 {
		out += fmt.Sprintf("; %d failed, the last: %s", u.Failed, safe(u.LastError))
	}
	return out
}
