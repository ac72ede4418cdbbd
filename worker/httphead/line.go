package httphead

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errLineTooLong is readLine's internal signal that a line exceeded its
// bound; callers turn it into the *Error for their context.
var errLineTooLong = errors.New("httphead: line too long")

// readLine returns the next line of r including its LF. The line is at most
// max bytes long; a longer one returns errLineTooLong with a prefix of the
// line (at least its first 32 bytes when it has them) for diagnosis.
//
// readLine works with any buffer size of r: fragments returned by
// ReadSlice with bufio.ErrBufferFull are accumulated in *scratch, which
// therefore never grows past max plus one fragment. The returned slice
// aliases r's buffer or *scratch and is valid only until the next read.
//
// At end of input it returns the partial line (possibly empty) and io.EOF.
// Other read errors are returned as they are, with the partial line.
//
// A line that already holds a CR followed by a byte other than LF, or a NUL,
// is refused with an *Error as soon as that byte is read, without waiting
// for the LF that may never come: such a line is invalid whatever follows
// (RFC 9112 §2.2), and a client that sends a bare CR just before the body
// would otherwise hold the round until the head deadline.
func readLine(r *bufio.Reader, max int, scratch *[]byte) ([]byte, error) {
	acc := (*scratch)[:0]
	defer func() { *scratch = acc[:0] }()
	for {
		if err := fillLine(r, len(acc) > 0 && acc[len(acc)-1] == '\r', max-len(acc)); err != nil {
			if _, ok := err.(*Error); ok {
				return acc, err
			}
			frag, _ := r.Peek(r.Buffered())
			acc = append(acc, frag...)
			r.Discard(len(frag))
			return acc, err
		}
		frag, err := r.ReadSlice('\n')
		if len(acc)+len(frag) > max {
			if len(acc) == 0 {
				return frag, errLineTooLong
			}
			acc = append(acc, excerpt(frag, 32)...)
			return acc, errLineTooLong
		}
		switch err {
		case nil:
			if len(acc) == 0 {
				return frag, nil
			}
			acc = append(acc, frag...)
			return acc, nil
		case bufio.ErrBufferFull:
			acc = append(acc, frag...)
		default:
			acc = append(acc, frag...)
			return acc, err
		}
	}
}

// fillLine reads into r's buffer until it holds an LF or is full, and
// returns nil then. It returns a *Error as soon as the buffered part of the
// line holds a NUL or a CR followed by a byte other than LF (prevCR: the
// line so far ends in CR), and the read error, if reading stops before.
//
// It looks at no byte at or past limit, the line's remaining length: the
// first fault by position decides a line's verdict, an overlong line's
// being at limit, so that the verdict does not depend on the buffer's size.
func fillLine(r *bufio.Reader, prevCR bool, limit int) error {
	scanned := 0
	for {
		n := r.Buffered()
		buf, _ := r.Peek(n)
		end := min(n, limit)
		lf := bytes.IndexByte(buf[scanned:], '\n')
		if lf >= 0 {
			end = min(end, scanned+lf)
		}
		if prevCR && n > 0 && buf[0] != '\n' {
			return newError(CodeBareCR, "CR not followed by LF")
		}
		for i := scanned; i < end; i++ {
			switch c := buf[i]; {
			case c == 0:
				return newError(CodeNULByte, fmt.Sprintf("NUL at offset %d of a line", i))
			case c == '\r' && i+1 < n && buf[i+1] != '\n':
				return newError(CodeBareCR, "CR not followed by LF")
			}
		}
		// A line ending in CR needs the next byte even at its limit.
		if lf >= 0 || n == r.Size() || n >= limit && (n > 0 || !prevCR) {
			return nil
		}
		// A trailing CR is decided by the next byte; scan it again.
		scanned = n
		if n > 0 && buf[n-1] == '\r' {
			scanned = n - 1
		}
		if _, err := r.Peek(n + 1); err != nil && r.Buffered() == n {
			return err
		}
	}
}

// lineContent checks the ending of a complete line read by readLine and
// returns the line without its CRLF.
//
// RFC 9112 §2.2 lets a recipient accept a bare LF as a line terminator;
// gatehouse does not, because a front end that splits lines differently
// from the application behind it is the classic request-smuggling setup.
// The same section says a bare CR must be rejected or replaced by SP; we
// reject it, and NUL too (RFC 9110 §5.5).
func lineContent(line []byte) ([]byte, *Error) {
	n := len(line)
	if n < 2 || line[n-2] != '\r' {
		return nil, newError(CodeBareLF, "line ends in LF without CR")
	}
	content := line[:n-2]
	if i := bytes.IndexByte(content, 0); i >= 0 {
		return nil, newError(CodeNULByte, fmt.Sprintf("NUL at offset %d of a line", i))
	}
	if i := bytes.IndexByte(content, '\r'); i >= 0 {
		return nil, newError(CodeBareCR, fmt.Sprintf("CR not followed by LF at offset %d of a line", i))
	}
	return content, nil
}

// readError converts a read error in the middle of a message into the error
// ReadHead and the chunked reader return: a *Error from readLine as it is,
// io.ErrUnexpectedEOF for a clean end of input, and anything else wrapped so that errors.As still finds a
// net.Error (a deadline, say) under it.
func readError(what string, err error) error {
	if e, ok := err.(*Error); ok {
		return e
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
