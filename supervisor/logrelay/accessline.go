package logrelay

import (
	"strings"
	"unicode/utf8"
)

// Format is the access log's line format, which a relay checks each line
// of a worker's against.
type Format uint8

const (
	JSON          Format = iota // worker/accesslog/accesslog.go's appendJSON
	Combined                    // worker/accesslog/accesslog.go's appendCombined
	VHostCombined               // appendHostToken, a space, then appendCombined
)

// FormatOf is the Format of log.access_log_format's value name.
func FormatOf(name string) Format {
	switch name {
	case "combined":
		return Combined
	case "vhost_combined":
		return VHostCombined
	}
	return JSON
}

// accessLine reports whether line (without its newline) is an access line of
// format as worker slot writes it: its fields in their order, every string
// escaped, nothing else. Such a line begins with `{"time":`, a client
// address or a lower-case host name, so it can never pass for one of the
// supervisor's own log lines (hclog text begins with a timestamp, whose "T"
// is upper case, hclog JSON with `{"@level":`) nor carry a journald priority
// prefix (`<0>`); it holds no control byte (C0, DEL, C1) and no invalid
// UTF-8. A JSON line names its worker, which must be slot. The check is one
// pass over the line, with no allocation.
func accessLine(line []byte, slot int, format Format) bool {
	p := lineScan{b: line}
	if format == VHostCombined && !(p.host() && p.lit(" ")) {
		return false
	}
	if format != JSON {
		return p.client() && p.lit(" - - [") && p.template("dd/Aaa/dddd:dd:dd:dd +0000") &&
			p.lit(`] `) && p.quoted() && p.lit(" ") && p.integer() && p.lit(" ") && p.integer() &&
			p.lit(" ") && p.quoted() && p.lit(" ") && p.quoted() && p.end()
	}
	return p.lit(`{"time":"`) && p.template("dddd-dd-ddTdd:dd:dd.dddZ") &&
		p.lit(`","worker":`) && p.decimal(slot) &&
		p.lit(`,"client":`) && p.str() &&
		p.lit(`,"host":`) && p.str() &&
		p.lit(`,"method":`) && p.str() &&
		p.lit(`,"path":`) && p.str() &&
		p.lit(`,"proto":`) && p.str() &&
		p.lit(`,"status":`) && p.integer() &&
		p.lit(`,"bytes":`) && p.integer() &&
		p.lit(`,"duration_us":`) && p.integer() &&
		p.lit(`,"referer":`) && p.str() &&
		p.lit(`,"user_agent":`) && p.str() &&
		p.lit(`}`) && p.end()
}

// lineScan consumes a line from its start.
type lineScan struct {
	b []byte
	i int
}

func (p *lineScan) end() bool { return p.i == len(p.b) }

// lit consumes s.
func (p *lineScan) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// template consumes bytes matching t, where 'd' is a digit, 'A' an upper-case
// and 'a' a lower-case letter, and any other byte itself.
func (p *lineScan) template(t string) bool {
	if len(p.b)-p.i < len(t) {
		return false
	}
	for j := 0; j < len(t); j++ {
		c := p.b[p.i+j]
		switch t[j] {
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case 'A':
			if c < 'A' || c > 'Z' {
				return false
			}
		case 'a':
			if c < 'a' || c > 'z' {
				return false
			}
		default:
			if c != t[j] {
				return false
			}
		}
	}
	p.i += len(t)
	return true
}

// integer consumes a decimal integer, perhaps negative.
func (p *lineScan) integer() bool {
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 20 {
		p.i++
	}
	return p.i > start
}

// decimal consumes n in decimal, as strconv writes it.
func (p *lineScan) decimal(n int) bool {
	start := p.i
	v := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 10 {
		v = v*10 + int(p.b[p.i]-'0')
		p.i++
	}
	return p.i > start && v == n && (p.b[start] != '0' || p.i == start+1)
}

// str consumes a JSON string as appendJSONString writes it: printable
// characters, `\"`, `\\` and `\uXXXX` escapes, valid UTF-8 with no C1
// control.
func (p *lineScan) str() bool {
	if !p.lit(`"`) {
		return false
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return false
			}
			switch p.b[p.i+1] {
			case '"', '\\':
				p.i += 2
			case 'u':
				p.i += 2
				if !p.hex(4) {
					return false
				}
			default:
				return false
			}
		case c < 0x20 || c == 0x7f:
			return false
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n <= 1 || r >= 0x80 && r <= 0x9f {
				return false
			}
			p.i += n
		}
	}
	return false
}

// hex consumes n hexadecimal digits.
func (p *lineScan) hex(n int) bool {
	if len(p.b)-p.i < n {
		return false
	}
	for _, c := range p.b[p.i : p.i+n] {
		if !isHex(c) {
			return false
		}
	}
	p.i += n
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// client consumes the combined format's client: an address, a masked
// prefix, or "-".
func (p *lineScan) client() bool {
	for p.i < len(p.b) {
		c := p.b[p.i]
		if !isHex(c) && c != '.' && c != ':' && c != '/' && c != '-' {
			break
		}
		p.i++
	}
	return true
}

// host consumes the vhost_combined format's host as appendHostToken writes
// it: lower-case letters, digits, ".-_~%!$&'()*+,;=:" and \xHH escapes, at
// least one byte ("-" when there is no host).
func (p *lineScan) host() bool {
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '\\':
			if !p.lit(`\x`) || !p.hex(2) {
				return false
			}
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(".-_~%!$&'()*+,;=:", c) >= 0:
			p.i++
		default:
			return p.i > start
		}
	}
	return p.i > start
}

// quoted consumes a quoted field of the combined format as appendEscaped
// writes it: printable ASCII, with quotes, backslashes and every other byte
// as \xHH.
func (p *lineScan) quoted() bool {
	if !p.lit(`"`) {
		return false
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c == '\\':
			if !p.lit(`\x`) || !p.hex(2) {
				return false
			}
		case c < 0x20 || c >= 0x7f:
			return false
		default:
			p.i++
		}
	}
	return false
}
