// Package adminapi is the wire format of gatehouse's admin socket, shared by
// the supervisor that serves it and gatehousectl. It holds types only, so
// that a client links none of the supervisor.
//
// The admin socket is a Unix stream socket. A client writes one Request as a
// JSON object on one line (at most MaxRequest bytes before the newline) and
// reads one Reply, a JSON object on one line; it may send further requests on
// the same connection. A line that is too long or is not a Request gets an
// error Reply and the connection is closed; an unknown command or a bad
// argument gets an error Reply and the connection stays open. A peer that is
// neither root nor the supervisor's own user gets an error Reply at once and
// is disconnected.
package adminapi

import "time"

// MaxRequest is the longest request line accepted, without its newline.
const MaxRequest = 4 << 10

// Timeout is how long the supervisor waits for a request line, and for a
// reply to be written, before it closes the connection.
const Timeout = 5 * time.Second

// Commands.
const (
	CmdStatus  = "status"  // Reply.Status
	CmdWorkers = "workers" // Reply.Workers
	CmdConns   = "conns"   // Reply.Conns
	CmdClients = "clients" // Reply.Clients; args: [N], the top N (default DefaultClients)
	CmdMetrics = "metrics" // Reply.Metrics
	CmdReload  = "reload"  // Reply.Message; Error when the new file was refused
	CmdDrain   = "drain"   // Reply.Message; the supervisor stops accepting, finishes and exits
	// CmdUpgrade starts a new binary (args: [PATH]) and hands everything
	// over to it; Error when the new binary could not take over.
	CmdUpgrade  = "upgrade"   // Reply.Message
	CmdLogLevel = "log-level" // args: [LEVEL]; Reply.Message
	// CmdUpstreams reports every upstream's budget and address state.
	CmdUpstreams = "upstreams" // Reply.Upstreams
)

// DefaultClients is how many client keys `clients` lists without an argument.
const DefaultClients = 20

// Request is one command.
type Request struct {
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
}

// Reply answers one Request. OK is false exactly when Error is set; the other
// fields are set by the commands that name them. A command's list is always
// present in its reply, empty when there is nothing to list.
type Reply struct {
	OK        bool       `json:"ok"`
	Error     string     `json:"error,omitempty"`
	Message   string     `json:"message,omitempty"`
	Status    *Status    `json:"status,omitempty"`
	Workers   []Worker   `json:"workers,omitzero"`
	Conns     *Conns     `json:"conns,omitempty"`
	Clients   []Client   `json:"clients,omitzero"`
	Upstreams []Upstream `json:"upstreams,omitzero"`
	// Metrics is the Prometheus text exposition format.
	Metrics string `json:"metrics,omitempty"`
}

// Status is the `status` reply.
type Status struct {
	Version       string    `json:"version"`
	PID           int       `json:"pid"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// ConfigFile is "" when gatehouse runs on its built-in configuration.
	ConfigFile string   `json:"config_file"`
	Listeners  []string `json:"listeners"`
	Pool       int      `json:"pool"`
	Share      int      `json:"share"`
	AtWorkers  int      `json:"at_workers"`
	// Queued counts connections that have not sent a first request
	// (max_queued_connections' count: a plain one leaves it when its first
	// head is complete, a TLS one at its first Done); InFirstRequest counts
	// those at a worker in their first request (a long upload, an SSE
	// stream).
	Queued         int `json:"queued"`
	InFirstRequest int `json:"in_first_request"`
	Waiting        int `json:"waiting"`
	// HeadBytes is what the dispatcher holds of incomplete request heads.
	HeadBytes int `json:"head_buffer_bytes"`
	// Stress reports admission's stress mode, in which the first-byte and
	// head timeouts (in force: the two fields after it) are shortened.
	Stress                  bool    `json:"stress"`
	FirstByteTimeoutSeconds float64 `json:"first_byte_timeout_seconds"`
	HeadTimeoutSeconds      float64 `json:"head_timeout_seconds"`
	// BodyBytes and BodyConns are the body budget in use: request bodies
	// being received outside the pool.
	BodyBytes int64 `json:"body_budget_bytes"`
	BodyConns int   `json:"body_budget_connections"`
	// The stream budget (docs/DESIGN.md §10): stream-class requests and
	// upgraded connections open outside the pool, of StreamsMax, and how
	// many of each the budget refused.
	Streams         int      `json:"streams_open"`
	Upgrades        int      `json:"upgrades_open"`
	StreamsMax      int      `json:"streams_max"`
	StreamsRefused  uint64   `json:"streams_refused"`
	UpgradesRefused uint64   `json:"upgrades_refused"`
	Stopping        bool     `json:"stopping"`
	Workers         []Worker `json:"workers"`
	// WorkerDeaths counts worker deaths since start by reason: seccomp,
	// signal, exit, protocol, ping (only reasons seen are listed).
	WorkerDeaths map[string]uint64 `json:"worker_deaths"`
	// Privileges is what the supervisor process holds, read from
	// /proc/self/status when the reply is built.
	Privileges Privileges `json:"privileges"`
	// Certificates are the TLS listeners' certificates.
	Certificates []Certificate `json:"certificates,omitempty"`
	// CertificateErrors are the certificates the last reload could not
	// load; each stays listed until a reload loads it.
	CertificateErrors []CertificateError `json:"certificate_errors,omitempty"`
	// Cluster is the shared store's link, absent without a cluster block.
	Cluster *Cluster `json:"cluster,omitempty"`
	// Upgrade is the binary upgrade this process takes part in, and the
	// upgrades it saw fail.
	Upgrade Upgrade `json:"upgrade"`
}

// Upgrade is a binary upgrade as one of its two processes sees it
// (gatehousectl upgrade, SIGUSR2).
type Upgrade struct {
	// HandingOver: this is the old process, handing over to PeerPID,
	// which runs PeerVersion; Staying counts the connections it still
	// holds (streams, TLS, requests in flight), at the latest until
	// Deadline.
	HandingOver bool   `json:"handing_over"`
	PeerPID     int    `json:"peer_pid,omitempty"`
	PeerVersion string `json:"peer_version,omitempty"`
	Staying     int    `json:"staying"`
	// HandedOver counts the connections sent to the new process, Adopted
	// those received from an old one, Drained those the old process
	// closed instead.
	HandedOver uint64 `json:"handed_over"`
	Adopted    uint64 `json:"adopted"`
	Drained    uint64 `json:"drained"`
	// Failed counts upgrades that failed (the running version served on);
	// LastError is the latest one's reason.
	Failed    uint64 `json:"failed"`
	LastError string `json:"last_error,omitempty"`
	// Starting is the new binary an upgrade is starting, not ready yet.
	Starting string `json:"starting,omitempty"`
	// OldDraining: this is the new process, and the old one, PeerPID,
	// still holds Staying connections.
	OldDraining bool `json:"old_draining"`
}

// Cluster is the link to the store several instances share rate limits,
// penalties and ticket keys through.
type Cluster struct {
	Instance string `json:"instance"`
	Address  string `json:"address"`
	// Up is false while the store is unreachable: every decision is then
	// this instance's own.
	Up bool `json:"up"`
	// Since is when Up last changed (or the link started).
	Since time.Time `json:"since"`
	// Error is why the store is down ("" when up).
	Error string `json:"error,omitempty"`
	// SharedTickets is true while the TLS session ticket keys in use are
	// the store's (cluster.secret_file set, and read from the store).
	SharedTickets bool `json:"shared_tickets"`
}

// CertificateError is a certificate a reload could not load.
type CertificateError struct {
	Listener string `json:"listener"`
	Name     string `json:"name"`
	// Error names the file and line at fault.
	Error string `json:"error"`
	// Kept is true when the previous certificate is still served.
	Kept bool `json:"kept"`
	// Since is when reloads began failing for it.
	Since time.Time `json:"since"`
}

// Certificate is one TLS certificate: its listener, its configuration
// block's name, the names it covers and when it expires.
type Certificate struct {
	Listener string    `json:"listener"`
	Name     string    `json:"name"`
	DNSNames []string  `json:"dns_names"`
	NotAfter time.Time `json:"not_after"`
	// Loaded is when it was read: at start or by a reload.
	Loaded time.Time `json:"loaded"`
}

// Privileges are the supervisor's ids and capabilities, and what keeps its
// workers apart from it.
type Privileges struct {
	EUID int `json:"euid"`
	EGID int `json:"egid"`
	// CapEff and CapBnd are the effective and bounding sets as /proc shows
	// them (hexadecimal masks); Capabilities names the effective ones.
	CapEff       string `json:"cap_eff"`
	CapBnd       string `json:"cap_bnd"`
	Capabilities string `json:"capabilities"`
	NoNewPrivs   bool   `json:"no_new_privs"`
	// SpawnerPID is the process that starts workers (0: the supervisor).
	SpawnerPID int `json:"spawner_pid"`
	// LauncherPID is the root process that starts an upgrade's binary
	// (0: none, gatehouse was not started as root).
	LauncherPID int `json:"launcher_pid,omitempty"`
	// Separation says what keeps workers from signalling or tracing the
	// supervisor: distinct accounts, or namespaces only.
	Separation string `json:"separation"`
}

// Worker is one worker slot.
type Worker struct {
	Slot  int    `json:"slot"`
	PID   int    `json:"pid"` // 0 while no process runs in the slot
	State string `json:"state"`
	// Sandbox lists the sandbox layers, each "+name" (applied) or "-name".
	Sandbox []string `json:"sandbox"`
	// Active is how many connections are out at the worker now.
	Active int `json:"active"`
	// Kept is how many parked plain connections' descriptors it keeps
	// (affinity), and TLS how many TLS connections' state it holds, out
	// at it or parked.
	Kept     int    `json:"kept"`
	TLS      int    `json:"tls"`
	Served   uint64 `json:"served"`
	Restarts int    `json:"restarts"`
	// BackoffSeconds is the delay before the slot's last respawn.
	BackoffSeconds float64 `json:"backoff_seconds"`
	// Threads is how many threads run its Go code at once (GOMAXPROCS),
	// as it reported when ready; 0 before.
	Threads int `json:"threads"`
}

// Conns is the `conns` reply.
type Conns struct {
	// ByState counts open connections by state: proxy (before its PROXY
	// header), fresh (before its first byte), head (part of a head
	// received), waiting, at_worker, idle, linger.
	ByState   map[string]int `json:"by_state"`
	Total     int            `json:"total"`
	AtWorkers int            `json:"at_workers"`
	Waiting   int            `json:"waiting"` // readable, waiting for a pool slot
	Queued    int            `json:"queued"`  // not yet sent a first request (max_queued_connections)
	// InFirstRequest is how many are at a worker in their first request:
	// past their head (a long upload, an SSE stream).
	InFirstRequest int `json:"in_first_request"`
	Pool           int `json:"pool"`
	Share          int `json:"share"`
}

// Client is one client key.
type Client struct {
	Key     string `json:"key"`
	Trusted bool   `json:"trusted"`
	Conns   int    `json:"conns"`   // open connections
	Out     int    `json:"out"`     // pool slots held (connections at workers)
	Waiting int    `json:"waiting"` // connections waiting in its share queue now
	Waits   uint64 `json:"waits"`   // times one of its connections waited for its share
	// PenaltySeconds is how long the key is still refused for having had
	// connections at dying workers too often (0: not refused).
	PenaltySeconds float64 `json:"penalty_seconds"`
	// Deaths counts the worker deaths of the last minute it had a
	// connection at, toward a penalty.
	Deaths int `json:"deaths"`
	// BodyConns and BodyBytes are its share of the body budget: request
	// bodies being received outside the pool.
	BodyConns int   `json:"body_conns"`
	BodyBytes int64 `json:"body_bytes"`
}

// Upstream is one upstream's connection budget and its addresses.
type Upstream struct {
	Name           string            `json:"name"`
	MaxConnections int               `json:"max_connections"`
	Share          int               `json:"share"`   // connections one worker may hold
	Held           int               `json:"held"`    // held by workers, in use or pooled
	Dialing        int               `json:"dialing"` // being dialed
	Waiting        int               `json:"waiting"` // dials waiting for pooled connections to be reclaimed
	Reclaims       uint64            `json:"reclaims"`
	ShareRefused   uint64            `json:"share_refused"`
	Addresses      []UpstreamAddress `json:"addresses"`
}

// UpstreamAddress is one upstream address. State is "up", "down" (out of
// rotation for fail_timeout after failed dials), "probing" (the next dial
// tests it) or "check-failed" (its health check fails).
type UpstreamAddress struct {
	Address        string  `json:"address"`        // an IP and port, or "unix:/path"
	Host           string  `json:"host,omitempty"` // the "name:port" Address was resolved from
	State          string  `json:"state"`
	Fails          int     `json:"fails"` // consecutive failed dials
	Dials          uint64  `json:"dials"`
	Failures       uint64  `json:"failures"`
	DownForSeconds float64 `json:"down_for_seconds"`
	LastError      string  `json:"last_error,omitempty"`
}
