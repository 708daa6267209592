package signin

import (
	"context"
	"errors"
	"fmt"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// ErrIdPRefused is wrapped when the IdP refuses a person's refresh token
// (invalid_grant): the person was disabled or their consent revoked there.
var ErrIdPRefused = errors.New("signin: the IdP refused the refresh token")

// ErrIdPUnavailable is wrapped when the IdP could not answer (network,
// 5xx, temporarily_unavailable): a caller may tolerate it for a grace
// period, then must fail closed.
var ErrIdPUnavailable = errors.New("signin: the IdP is unavailable")

// Refresh re-checks a person with their organization's IdP by using their
// refresh token, and returns the IdP's rotated refresh token (the old one
// when the IdP does not rotate).
func (s *Service) Refresh(ctx context.Context, tenant, refreshToken string) (string, error) {
	t, ok := s.tenants[tenant]
	if !ok {
		return "", fmt.Errorf("signin: no IdP for tenant %q", tenant)
	}
	tokens, err := rp.RefreshTokens[*oidc.IDTokenClaims](ctx, t.rp, refreshToken, "", "")
	if err != nil {
		var oe *oidc.Error
		if errors.As(err, &oe) && oe.ErrorType == oidc.InvalidGrant {
			return "", fmt.Errorf("%w (tenant %s)", ErrIdPRefused, tenant)
		}
		// Never include the token; the IdP's error text is safe to keep.
		return "", fmt.Errorf("%w (tenant %s): %v", ErrIdPUnavailable, tenant, err)
	}
	if tokens.RefreshToken != "" {
		return tokens.RefreshToken, nil
	}
	return refreshToken, nil
}
