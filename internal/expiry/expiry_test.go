package expiry

import (
	"testing"
	"time"
)

func TestText(t *testing.T) {
	now := time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		notAfter time.Time
		want     string
	}{
		{now.Add(1439 * time.Hour), "expires 2027-01-31 (in 59 days)"},
		{now.Add(34*24*time.Hour + time.Minute), "expires 2027-01-05 (in 34 days)"},
		{now.Add(30 * time.Hour), "expires 2026-12-04 (in 1 day)"},
		{now.Add(time.Hour), "expires 2026-12-03 (in less than a day)"},
		{now.Add(-time.Hour), "expired 2026-12-02 (less than a day ago)"},
		{now.Add(-31 * 24 * time.Hour), "expired 2026-11-01 (31 days ago)"},
	} {
		if got := Text(tc.notAfter, now); got != tc.want {
			t.Errorf("Text(%v) = %q, want %q", tc.notAfter, got, tc.want)
		}
	}
}
