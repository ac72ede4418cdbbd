// Package expiry writes when a certificate expires the way people read it:
// a date and a count of days, never a duration such as 1439h0m0s. The
// configuration check, the supervisor's log and gatehousectl share it.
package expiry

import (
	"fmt"
	"time"
)

const day = 24 * time.Hour

// Text is "expires 2027-01-05 (in 34 days)" or, once past, "expired
// 2026-11-01 (31 days ago)"; the date is UTC, the days whole days.
func Text(notAfter, now time.Time) string {
	date := notAfter.UTC().Format(time.DateOnly)
	if left := notAfter.Sub(now); left >= 0 {
		return fmt.Sprintf("expires %s (in %s)", date, days(left))
	}
	return fmt.Sprintf("expired %s (%s ago)", date, days(now.Sub(notAfter)))
}

// days is d in whole days: "34 days", "1 day", "less than a day".
func days(d time.Duration) string {
	switch n := int64(d / day); n {
	case 0:
		return "less than a day"
	case 1:
		return "1 day"
	default:
		return fmt.Sprintf("%d days", n)
	}
}
