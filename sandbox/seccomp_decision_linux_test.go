package sandbox_test

import (
	"encoding/binary"
	"runtime"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// seccompData is the kernel's struct seccomp_data, which a filter reads in
// the machine's own byte order.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.NativeEndian.PutUint32(b[0:], uint32(d.nr))
	binary.NativeEndian.PutUint32(b[4:], d.arch)
	binary.NativeEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.NativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// runFilter interprets the classic BPF instructions a seccomp filter uses
// (32-bit absolute loads, ALU with constants, conditional jumps, returns)
// over native-endian seccomp_data. x/net/bpf's VM reads big-endian words,
// so it cannot evaluate a seccomp filter as the kernel does.
func runFilter(t *testing.T, prog []bpf.Instruction, data []byte) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		switch ins := prog[pc].(type) {
		case bpf.LoadAbsolute:
			if ins.Size != 4 || int(ins.Off)+4 > len(data) {
				t.Fatalf("unsupported load %#v", ins)
			}
			a = binary.NativeEndian.Uint32(data[ins.Off:])
		case bpf.ALUOpConstant:
			switch ins.Op {
			case bpf.ALUOpAnd:
				a &= ins.Val
			default:
				t.Fatalf("unsupported ALU op %#v", ins)
			}
		case bpf.Jump:
			pc += int(ins.Skip)
		case bpf.JumpIf:
			var ok bool
			switch ins.Cond {
			case bpf.JumpEqual:
				ok = a == ins.Val
			case bpf.JumpNotEqual:
				ok = a != ins.Val
			case bpf.JumpGreaterThan:
				ok = a > ins.Val
			case bpf.JumpGreaterOrEqual:
				ok = a >= ins.Val
			case bpf.JumpLessThan:
				ok = a < ins.Val
			case bpf.JumpLessOrEqual:
				ok = a <= ins.Val
			case bpf.JumpBitsSet:
				ok = a&ins.Val != 0
			case bpf.JumpBitsNotSet:
				ok = a&ins.Val == 0
			default:
				t.Fatalf("unsupported jump %#v", ins)
			}
			if ok {
				pc += int(ins.SkipTrue)
			} else {
				pc += int(ins.SkipFalse)
			}
		case bpf.RetConstant:
			return ins.Val
		default:
			t.Fatalf("unsupported instruction %#v", ins)
		}
	}
	t.Fatal("filter fell off its end")
	return 0
}

// TestSeccompOpenatFlags checks the filter's decision for openat with each
// flag combination the Go runtime and os.Root use, and for every write flag.
func TestSeccompOpenatFlags(t *testing.T) {
	pol := sandbox.SeccompPolicy(sandbox.Kill, 1)
	prog, err := pol.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	auditArch := uint32(unix.AUDIT_ARCH_X86_64)
	if runtime.GOARCH != "amd64" {
		auditArch = unix.AUDIT_ARCH_AARCH64
	}
	const ro = unix.O_RDONLY | unix.O_CLOEXEC
	tmpfileBit := uint64(unix.O_TMPFILE &^ unix.O_DIRECTORY)
	tests := []struct {
		name  string
		flags uint64
		allow bool
	}{
		{"os.Root file", ro | unix.O_NOFOLLOW, true},
		{"os.Root directory", ro | unix.O_DIRECTORY | unix.O_NOFOLLOW, true},
		{"os.Root intermediate", ro | unix.O_DIRECTORY, true},
		{"O_PATH", unix.O_PATH | unix.O_CLOEXEC, true},
		{"O_PATH directory", unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, true},
		{"nonblocking", ro | unix.O_NONBLOCK, true},
		{"largefile noatime", ro | unix.O_LARGEFILE | unix.O_NOATIME, true},
		{"plain read-only", unix.O_RDONLY, true},
		{"O_WRONLY", ro | unix.O_WRONLY, false},
		{"O_RDWR", ro | unix.O_RDWR, false},
		{"O_CREAT", ro | unix.O_CREAT, false},
		{"O_TRUNC", ro | unix.O_TRUNC, false},
		{"O_APPEND", ro | unix.O_APPEND, false},
		{"__O_TMPFILE alone", ro | tmpfileBit, false},
		{"O_TMPFILE", unix.O_TMPFILE | unix.O_RDWR, false},
		{"O_CREAT with O_DIRECTORY", ro | unix.O_DIRECTORY | unix.O_CREAT, false},
		{"write flags above bit 31 ignored", ro | 1<<40, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := seccompData{nr: int32(unix.SYS_OPENAT), arch: auditArch}
			d.args = [6]uint64{3, 0x1000, tt.flags, 0}
			got := seccomp.Action(runFilter(t, prog, d.bytes()))
			allowed := got == seccomp.ActionAllow
			if allowed != tt.allow {
				t.Errorf("openat(flags=%#x) = %v, want allow=%v", tt.flags, got, tt.allow)
			}
		})
	}
	// The interpreter itself must be able to refuse: a syscall outside the
	// allow-list gets the default action.
	d := seccompData{nr: int32(unix.SYS_SOCKET), arch: auditArch}
	if got := seccomp.Action(runFilter(t, prog, d.bytes())); got != seccomp.ActionKillProcess {
		t.Errorf("socket = %v, want %v", got, seccomp.ActionKillProcess)
	}
}

// TestSeccompRelay checks that the filter allows what an upgraded
// connection's relay uses (pipe2 and splice) and still refuses its
// neighbours that reach beyond held descriptors.
func TestSeccompRelay(t *testing.T) {
	pol := sandbox.SeccompPolicy(sandbox.Kill, 1)
	prog, err := pol.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	auditArch := uint32(unix.AUDIT_ARCH_X86_64)
	if runtime.GOARCH != "amd64" {
		auditArch = unix.AUDIT_ARCH_AARCH64
	}
	tests := []struct {
		name  string
		nr    uintptr
		args  [6]uint64
		allow bool
	}{
		{"pipe2", unix.SYS_PIPE2, [6]uint64{0x1000, unix.O_CLOEXEC | unix.O_NONBLOCK}, true},
		{"splice socket to pipe", unix.SYS_SPLICE, [6]uint64{5, 0, 8, 0, 64 << 10, unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK}, true},
		{"splice pipe to socket", unix.SYS_SPLICE, [6]uint64{7, 0, 6, 0, 64 << 10, unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK}, true},
		{"socket", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, false},
		{"connect", unix.SYS_CONNECT, [6]uint64{5, 0x1000, 16}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := seccompData{nr: int32(tt.nr), arch: auditArch, args: tt.args}
			allowed := seccomp.Action(runFilter(t, prog, d.bytes())) == seccomp.ActionAllow
			if allowed != tt.allow {
				t.Errorf("%s allowed = %v, want %v", tt.name, allowed, tt.allow)
			}
		})
	}
}

// TestSeccompFcntl checks that the filter allows the fcntl commands the
// runtime uses, and F_SETFL only with O_NONBLOCK set: a worker that clears
// it on a connection's open file description, which the supervisor's copy
// shares, is killed.
func TestSeccompFcntl(t *testing.T) {
	pol := sandbox.SeccompPolicy(sandbox.Kill, 1)
	prog, err := pol.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	auditArch := uint32(unix.AUDIT_ARCH_X86_64)
	if runtime.GOARCH != "amd64" {
		auditArch = unix.AUDIT_ARCH_AARCH64
	}
	kill := seccomp.ActionKillProcess
	tests := []struct {
		name     string
		cmd, arg uint64
		want     seccomp.Action
	}{
		{"F_GETFL", unix.F_GETFL, 0, seccomp.ActionAllow},
		{"F_GETFD", unix.F_GETFD, 0, seccomp.ActionAllow},
		{"F_SETFD", unix.F_SETFD, unix.FD_CLOEXEC, seccomp.ActionAllow},
		{"F_DUPFD_CLOEXEC", unix.F_DUPFD_CLOEXEC, 0, seccomp.ActionAllow},
		{"F_SETFL sets O_NONBLOCK (net.FileConn)", unix.F_SETFL, unix.O_RDWR | unix.O_NONBLOCK, seccomp.ActionAllow},
		{"F_SETFL keeps O_NONBLOCK", unix.F_SETFL, unix.O_RDONLY | unix.O_NONBLOCK | unix.O_LARGEFILE, seccomp.ActionAllow},
		{"F_SETFL clears O_NONBLOCK", unix.F_SETFL, unix.O_RDWR, kill},
		{"F_SETFL clears O_NONBLOCK of a file (os)", unix.F_SETFL, unix.O_RDONLY | unix.O_LARGEFILE, kill},
		{"F_SETFL zero", unix.F_SETFL, 0, kill},
		{"F_SETFL O_NONBLOCK above bit 31 only", unix.F_SETFL, unix.O_NONBLOCK << 32, kill},
		{"F_SETOWN", unix.F_SETOWN, 1, kill},
		{"F_SETLK", unix.F_SETLK, 0x1000, kill},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := seccompData{nr: int32(unix.SYS_FCNTL), arch: auditArch, args: [6]uint64{5, tt.cmd, tt.arg}}
			if got := seccomp.Action(runFilter(t, prog, d.bytes())); got != tt.want {
				t.Errorf("fcntl(5, %#x, %#x) = %#x, want %#x", tt.cmd, tt.arg, uint32(got), uint32(tt.want))
			}
		})
	}
}
