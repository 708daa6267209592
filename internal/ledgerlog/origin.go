package ledgerlog

import (
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/alp"
)

// originInfix separates the tenant from the person in a log origin. It also
// ends the key name, so a key name is always a prefix of the origins it
// signs, as C2SP tlog-checkpoint recommends ("the log's key name SHOULD match
// the origin line" — one key per tenant is the closest fit).
const originInfix = "/alp/ledger"

// Origin returns the origin line of a person's log,
// "<tenant>/alp/ledger/<personID>", or "" if either part is invalid (see
// ValidateOriginParts for the reason). An empty origin is refused by every
// function that builds a leaf or a checkpoint, so a bad input cannot slip
// through silently.
func Origin(tenant, personID string) string {
	if ValidateOriginParts(tenant, personID) != nil {
		return ""
	}
	return tenant + originInfix + "/" + personID
}

// ValidateOriginParts checks the parts of an origin: a tenant and a person
// id (alp.ValidatePerson). Origins appear in signed-note text and key names,
// which forbid spaces and '+', and readers use them in file names; both rules
// keep to characters safe there.
func ValidateOriginParts(tenant, personID string) error {
	if err := alp.ValidatePerson(tenant, personID); err != nil {
		return fmt.Errorf("ledgerlog: origin: %w", err)
	}
	return nil
}

// KeyName is the signed-note key name of a tenant's ledger key,
// "<tenant>/alp/ledger". It does not validate the tenant (NoteSigner and
// VerifierKey do).
func KeyName(tenant string) string { return tenant + originInfix }

// ParseOrigin splits an origin made by Origin back into tenant and person id,
// validating both.
func ParseOrigin(origin string) (tenant, personID string, err error) {
	tenant, personID, ok := strings.Cut(origin, originInfix+"/")
	if !ok {
		return "", "", fmt.Errorf("ledgerlog: origin %s is not <tenant>%s/<person>", quote(origin), originInfix)
	}
	if err := ValidateOriginParts(tenant, personID); err != nil {
		return "", "", fmt.Errorf("ledgerlog: origin %s: %w", quote(origin), err)
	}
	return tenant, personID, nil
}

// OriginKeyName is the key name that must sign checkpoints and receipts of
// the given origin.
func OriginKeyName(origin string) (string, error) {
	tenant, _, err := ParseOrigin(origin)
	if err != nil {
		return "", err
	}
	return KeyName(tenant), nil
}

// quote renders untrusted text for an error message: quoted (no control
// characters reach a terminal or log) and truncated.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
