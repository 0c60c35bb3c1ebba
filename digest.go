package nah

import (
	"fmt"
	"strings"
	"time"

	// The time-zone database is embedded (~450 KB) so that a minimal box
	// without /usr/share/zoneinfo still knows every zone a phone may send.
	_ "time/tzdata"
)

// Digest is a person's choice of a daily digest: a local time of day and
// the IANA zone it is read in.
type Digest struct {
	Minute   int    // minute of the local day, 0 to 1439
	Timezone string // an IANA name such as Europe/Lisbon
	Enabled  bool
}

// Time is the digest's local time as "HH:MM".
func (d Digest) Time() string { return fmt.Sprintf("%02d:%02d", d.Minute/60, d.Minute%60) }

// ParseDigestTime reads "HH:MM" (24-hour, two digits each) into a minute
// of the day. An Invalid error names the field.
func ParseDigestTime(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, Errorf(Invalid, "invalid_time", "time is a local time of day as HH:MM, such as 08:30")
	}
	return t.Hour()*60 + t.Minute(), nil
}

// maxZoneLen bounds a zone name before it reaches the zone database; the
// longest IANA name is 32 characters.
const maxZoneLen = 64

// LoadZone returns the location of an IANA zone name. "Local", the empty
// name, the host's own files and anything the database does not hold are
// an Invalid error naming the field: a digest is read in the person's
// zone, never the server's.
func LoadZone(name string) (*time.Location, error) {
	bad := Errorf(Invalid, "invalid_timezone", "timezone is an IANA time zone name, such as Europe/Lisbon")
	if name == "" || name == "Local" || len(name) > maxZoneLen || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/_+-", r))
	}) {
		return nil, bad
	}
	// time.LoadLocation reads the host's zoneinfo before the embedded
	// database, and the host's holds files that are no IANA zone:
	// localtime (the host's own zone), posixrules (New York's rules on
	// Debian), and posix/ and right/ copies of every zone (right/ with
	// leap seconds). None of them is in the embedded database.
	if name == "localtime" || name == "posixrules" || strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/") {
		return nil, bad
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, bad
	}
	return loc, nil
}

// Push devices: a phone's token for the push relay (APNs or FCM), which is
// a secret: whoever holds it can push to the phone.
const (
	// MaxDevices is how many devices a person may register; registering
	// one more drops the one registered longest ago.
	MaxDevices = 10
	// MaxDeviceTokenLen bounds a token: APNs tokens are 64 hex characters,
	// FCM tokens about 160.
	MaxDeviceTokenLen = 256
)

// Device platforms, the only two the relay knows.
const (
	PlatformIOS     = "ios"
	PlatformAndroid = "android"
)

// CheckDeviceToken returns an Invalid error when token is not 1 to 256
// characters of A-Z, a-z, 0-9, '-', '_', ':' and '.' (what APNs and FCM
// tokens are made of). It never repeats the token.
func CheckDeviceToken(token string) error {
	if len(token) == 0 || len(token) > MaxDeviceTokenLen || strings.ContainsFunc(token, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_:.", r))
	}) {
		return Errorf(Invalid, "invalid_token", "a device token is 1 to 256 characters of A-Z, a-z, 0-9, '-', '_', ':' and '.'")
	}
	return nil
}

// CheckPlatform returns an Invalid error naming the field unless p is ios
// or android.
func CheckPlatform(p string) error {
	if p != PlatformIOS && p != PlatformAndroid {
		return Errorf(Invalid, "invalid_platform", "platform is ios or android")
	}
	return nil
}

// MaskToken shows a device token to an operator without giving it away:
// its last four characters.
func MaskToken(token string) string {
	if len(token) <= 8 {
		return "…"
	}
	return "…" + token[len(token)-4:]
}
