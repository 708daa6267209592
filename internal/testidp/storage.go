package testidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the in-memory op.Storage of one IdP. All state is guarded by mu;
// values handed to the op package are copies, so the login handler can
// complete an auth request while op holds an older snapshot.
type storage struct {
	cfg    Config // normalized; Users/Clients are only read at construction
	issuer func() string
	log    *slog.Logger
	now    func() time.Time
	down   func() bool

	key   *rsa.PrivateKey
	keyID string

	mu            sync.Mutex
	users         map[string]*userState // by subject
	usernames     map[string]string     // lower-case username -> subject
	clients       map[string]Client
	authRequests  map[string]*authRequest
	codes         map[string]string // code -> auth request id
	accessTokens  map[string]*accessToken
	refreshTokens map[string]*refreshToken
	retired       map[string]retiredToken // rotated-out refresh tokens, for reuse detection
	sessions      map[string]*session
	lastSweep     time.Time
	// refreshNonce, when set, replaces the nonce of refreshed ID tokens
	// (IdP.SetRefreshedIDTokenNonce).
	refreshNonce string
}

type userState struct {
	User
	disabled bool
}

// authRequest implements op.AuthRequest.
type authRequest struct {
	id            string
	created       time.Time
	clientID      string
	redirectURI   string
	state         string
	nonce         string
	scopes        []string
	responseType  oidc.ResponseType
	responseMode  oidc.ResponseMode
	prompt        []string
	maxAge        *uint
	loginHint     string
	hintSubject   string // sub of a valid id_token_hint
	codeChallenge *oidc.CodeChallenge
	csrf          string // per-request token for the login form

	done     bool
	subject  string
	authTime time.Time
	amr      []string
	codeAt   time.Time
}

func (a *authRequest) clone() *authRequest {
	c := *a
	c.scopes = slices.Clone(a.scopes)
	c.prompt = slices.Clone(a.prompt)
	c.amr = slices.Clone(a.amr)
	if a.maxAge != nil {
		m := *a.maxAge
		c.maxAge = &m
	}
	if a.codeChallenge != nil {
		cc := *a.codeChallenge
		c.codeChallenge = &cc
	}
	return &c
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return a.amr }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.codeChallenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

// LogValue keeps secrets (csrf, code challenge) out of op's logs.
func (a *authRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", a.id),
		slog.String("client_id", a.clientID),
		slog.String("redirect_uri", a.redirectURI),
		slog.Any("scopes", a.scopes),
	)
}

type accessToken struct {
	id       string
	subject  string
	clientID string
	audience []string
	scopes   []string
	authTime time.Time
	amr      []string
	issued   time.Time
	expires  time.Time
	family   string // refresh token family, "" without offline_access
}

type refreshToken struct {
	token    string
	family   string
	subject  string
	clientID string
	scopes   []string // scopes of the original grant
	authTime time.Time
	amr      []string
	expires  time.Time
	nonce    string // of the sign-in that started the family
}

type retiredToken struct {
	family  string
	expires time.Time
}

// refreshTokenRequest implements op.RefreshTokenRequest; it is a copy of a
// stored refresh token whose current scopes may be narrowed by the client.
type refreshTokenRequest struct {
	rt            refreshToken
	currentScopes []string
}

func (r *refreshTokenRequest) GetAMR() []string            { return r.rt.amr }
func (r *refreshTokenRequest) GetAudience() []string       { return []string{r.rt.clientID} }
func (r *refreshTokenRequest) GetAuthTime() time.Time      { return r.rt.authTime }
func (r *refreshTokenRequest) GetClientID() string         { return r.rt.clientID }
func (r *refreshTokenRequest) GetScopes() []string         { return r.currentScopes }
func (r *refreshTokenRequest) GetSubject() string          { return r.rt.subject }
func (r *refreshTokenRequest) SetCurrentScopes(s []string) { r.currentScopes = slices.Clone(s) }

type session struct {
	id       string
	subject  string
	authTime time.Time
	amr      []string
	expires  time.Time
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func newStorage(cfg Config, issuer func() string, down func() bool) (*storage, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("testidp: generate signing key: %w", err)
	}
	s := &storage{
		cfg:           cfg,
		issuer:        issuer,
		log:           cfg.Logger,
		now:           time.Now,
		down:          down,
		key:           key,
		keyID:         rand.Text(),
		users:         map[string]*userState{},
		usernames:     map[string]string{},
		clients:       map[string]Client{},
		authRequests:  map[string]*authRequest{},
		codes:         map[string]string{},
		accessTokens:  map[string]*accessToken{},
		refreshTokens: map[string]*refreshToken{},
		retired:       map[string]retiredToken{},
		sessions:      map[string]*session{},
	}
	for _, u := range cfg.Users {
		s.users[u.Subject] = &userState{User: u, disabled: u.Disabled}
		s.usernames[strings.ToLower(u.Username)] = u.Subject
	}
	for _, c := range cfg.Clients {
		s.clients[c.ID] = c
	}
	return s, nil
}

// errNotFound marks unknown objects; op maps most of them to invalid_grant.
var errNotFound = errors.New("testidp: not found")

// sweepLocked drops expired state at most once a minute. s.mu must be held.
func (s *storage) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for id, ar := range s.authRequests {
		if now.Sub(ar.created) > authRequestLifetime {
			s.deleteAuthRequestLocked(id)
		}
	}
	for id, at := range s.accessTokens {
		if now.After(at.expires) {
			delete(s.accessTokens, id)
		}
	}
	for tok, rt := range s.refreshTokens {
		if now.After(rt.expires) {
			delete(s.refreshTokens, tok)
		}
	}
	for tok, rt := range s.retired {
		if now.After(rt.expires) {
			delete(s.retired, tok)
		}
	}
	for id, se := range s.sessions {
		if now.After(se.expires) {
			delete(s.sessions, id)
		}
	}
}

// activeUserLocked returns the user if it exists and is enabled.
func (s *storage) activeUserLocked(subject string) (*userState, error) {
	u, ok := s.users[subject]
	if !ok {
		return nil, fmt.Errorf("testidp: unknown user %q", subject)
	}
	if u.disabled {
		return nil, fmt.Errorf("testidp: user %q is disabled", subject)
	}
	return u, nil
}

func (s *storage) deleteAuthRequestLocked(id string) {
	delete(s.authRequests, id)
	for code, arID := range s.codes {
		if arID == id {
			delete(s.codes, code)
		}
	}
}

// revokeFamilyLocked removes every refresh and access token of a refresh
// token family.
func (s *storage) revokeFamilyLocked(family string) {
	for tok, rt := range s.refreshTokens {
		if rt.family == family {
			delete(s.refreshTokens, tok)
		}
	}
	for id, at := range s.accessTokens {
		if at.family == family {
			delete(s.accessTokens, id)
		}
	}
}

// ---- op.AuthStorage ----

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	// OAuth 2.1: PKCE is mandatory and only S256 is accepted. op itself
	// accepts a missing challenge and "plain" (RFC 7636 defaults), so the
	// check lives here; an *oidc.Error makes op redirect it to the client.
	if req.CodeChallenge == "" {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge is required (PKCE with S256)")
	}
	if req.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge_method must be S256")
	}
	if req.ResponseType != oidc.ResponseTypeCode {
		return nil, oidc.ErrUnauthorizedClient().WithDescription("only response_type=code is supported")
	}
	now := s.now()
	ar := &authRequest{
		id:            rand.Text(),
		created:       now,
		clientID:      req.ClientID,
		redirectURI:   req.RedirectURI,
		state:         req.State,
		nonce:         req.Nonce,
		scopes:        slices.Clone([]string(req.Scopes)),
		responseType:  req.ResponseType,
		responseMode:  req.ResponseMode,
		prompt:        slices.Clone([]string(req.Prompt)),
		loginHint:     req.LoginHint,
		hintSubject:   userID,
		codeChallenge: &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod},
		csrf:          rand.Text(),
	}
	if req.MaxAge != nil {
		m := *req.MaxAge
		ar.maxAge = &m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	s.authRequests[ar.id] = ar
	return ar.clone(), nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	return ar.clone(), nil
}

func (s *storage) authRequestLocked(id string) (*authRequest, error) {
	ar, ok := s.authRequests[id]
	if !ok {
		return nil, fmt.Errorf("testidp: auth request: %w", errNotFound)
	}
	if s.now().Sub(ar.created) > authRequestLifetime {
		s.deleteAuthRequestLocked(id)
		return nil, fmt.Errorf("testidp: auth request expired")
	}
	return ar, nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.codes[code]
	if !ok {
		return nil, fmt.Errorf("testidp: code: %w", errNotFound)
	}
	ar, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	if !ar.done {
		return nil, errors.New("testidp: auth request not completed")
	}
	if s.now().Sub(ar.codeAt) > codeLifetime {
		s.deleteAuthRequestLocked(id)
		return nil, errors.New("testidp: code expired")
	}
	if _, err := s.activeUserLocked(ar.subject); err != nil {
		s.deleteAuthRequestLocked(id)
		return nil, err
	}
	return ar.clone(), nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, err := s.authRequestLocked(id)
	if err != nil {
		return err
	}
	ar.codeAt = s.now()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest is called once a code was exchanged: codes are single use.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteAuthRequestLocked(id)
	return nil
}

// tokenInfo extracts what a stored token needs from any op token request.
func tokenInfo(req op.TokenRequest) (clientID string, authTime time.Time, amr []string, err error) {
	switch r := req.(type) {
	case *authRequest:
		return r.clientID, r.authTime, r.amr, nil
	case *refreshTokenRequest:
		return r.rt.clientID, r.rt.authTime, r.rt.amr, nil
	default:
		// Client credentials, JWT profile and token exchange are not offered.
		return "", time.Time{}, nil, oidc.ErrUnsupportedGrantType().WithDescription("grant not supported by testidp")
	}
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	clientID, authTime, amr, err := tokenInfo(req)
	if err != nil {
		return "", time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.activeUserLocked(req.GetSubject()); err != nil {
		return "", time.Time{}, oidc.ErrInvalidGrant().WithParent(err)
	}
	at := s.newAccessTokenLocked(req, clientID, authTime, amr, "")
	return at.id, at.expires, nil
}

func (s *storage) newAccessTokenLocked(req op.TokenRequest, clientID string, authTime time.Time, amr []string, family string) *accessToken {
	now := s.now()
	at := &accessToken{
		id:       rand.Text(),
		subject:  req.GetSubject(),
		clientID: clientID,
		audience: slices.Clone(req.GetAudience()),
		scopes:   slices.Clone(req.GetScopes()),
		authTime: authTime,
		amr:      slices.Clone(amr),
		issued:   now,
		expires:  now.Add(s.cfg.AccessTokenLifetime),
		family:   family,
	}
	s.accessTokens[at.id] = at
	return at
}

// CreateAccessAndRefreshTokens issues tokens for a code with offline_access
// and rotates the refresh token on the refresh grant: the presented token is
// retired, and presenting a retired token later revokes the whole family.
func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	clientID, authTime, amr, err := tokenInfo(req)
	if err != nil {
		return "", "", time.Time{}, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if _, err := s.activeUserLocked(req.GetSubject()); err != nil {
		return "", "", time.Time{}, oidc.ErrInvalidGrant().WithParent(err)
	}
	var family, nonce string
	scopes := slices.Clone(req.GetScopes())
	if ar, ok := req.(*authRequest); ok {
		nonce = ar.nonce
	}
	if current != "" {
		old, ok := s.refreshTokens[current]
		if !ok {
			// Lost a race with a concurrent use of the same token.
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("refresh token already used")
		}
		family = old.family
		nonce = old.nonce
		scopes = slices.Clone(old.scopes) // the new token keeps the grant's scope
		delete(s.refreshTokens, current)
		s.retired[current] = retiredToken{family: family, expires: old.expires}
	} else {
		family = rand.Text()
	}
	rt := &refreshToken{
		token:    rand.Text() + rand.Text(),
		family:   family,
		subject:  req.GetSubject(),
		clientID: clientID,
		scopes:   scopes,
		authTime: authTime,
		amr:      slices.Clone(amr),
		expires:  now.Add(s.cfg.RefreshTokenLifetime),
		nonce:    nonce,
	}
	s.refreshTokens[rt.token] = rt
	at := s.newAccessTokenLocked(req, clientID, authTime, amr, family)
	return at.id, rt.token, at.expires, nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refreshTokens[token]
	if !ok {
		if r, used := s.retired[token]; used {
			s.revokeFamilyLocked(r.family)
			s.log.Warn("testidp: rotated refresh token presented again; revoked its token family")
			return nil, errors.New("testidp: refresh token reused; token family revoked")
		}
		return nil, fmt.Errorf("testidp: refresh token: %w", errNotFound)
	}
	if s.now().After(rt.expires) {
		delete(s.refreshTokens, token)
		return nil, errors.New("testidp: refresh token expired")
	}
	if _, err := s.activeUserLocked(rt.subject); err != nil {
		return nil, err
	}
	return &refreshTokenRequest{rt: *rt, currentScopes: slices.Clone(rt.scopes)}, nil
}

func (s *storage) TerminateSession(_ context.Context, userID, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, se := range s.sessions {
		if se.subject == userID {
			delete(s.sessions, id)
		}
	}
	return nil
}

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _ string, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.refreshTokens[tokenOrID]; ok {
		if rt.clientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("token was issued to another client")
		}
		s.revokeFamilyLocked(rt.family)
		return nil
	}
	if at, ok := s.accessTokens[tokenOrID]; ok {
		if at.clientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("token was issued to another client")
		}
		delete(s.accessTokens, tokenOrID)
	}
	return nil // RFC 7009: unknown tokens are not an error
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refreshTokens[token]
	if !ok || rt.clientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return rt.subject, rt.token, nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{id: s.keyID, key: s.key}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{id: s.keyID, key: s.key}}}, nil
}

// ---- op.OPStorage ----

func (s *storage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	s.mu.Lock()
	c, ok := s.clients[clientID]
	s.mu.Unlock()
	if !ok {
		// An *oidc.Error: op's refresh grant returns this error unwrapped, and
		// a plain error would answer 500 server_error there.
		return nil, oidc.ErrInvalidClient().WithDescription("unknown client").WithParent(errNotFound)
	}
	return &opClient{Client: c, issuer: s.issuer(), idTokenLifetime: s.cfg.IDTokenLifetime, rolesScope: s.cfg.RolesScope}, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, clientID, secret string) error {
	s.mu.Lock()
	c, ok := s.clients[clientID]
	s.mu.Unlock()
	if !ok || c.Public() || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) != 1 {
		return errors.New("testidp: invalid client credentials")
	}
	return nil
}

// SetUserinfoFromScopes is deprecated in op; SetUserinfoFromRequest does the work.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token's user claims.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.activeUserLocked(req.GetSubject())
	if err != nil {
		return oidc.ErrInvalidGrant().WithParent(err)
	}
	s.fillUserinfo(info, u.User, scopes)
	// op sets the nonce only for an authorization request; a refreshed ID
	// token gets it here, as a private claim (Dex's behaviour).
	if rr, ok := req.(*refreshTokenRequest); ok {
		nonce := ""
		if s.cfg.NonceInRefreshedIDToken {
			nonce = rr.rt.nonce
		}
		if s.refreshNonce != "" {
			nonce = s.refreshNonce
		}
		if nonce != "" {
			info.AppendClaims("nonce", nonce)
		}
	}
	return nil
}

// SetUserinfoFromToken serves the userinfo endpoint.
func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.accessTokens[tokenID]
	if !ok || at.subject != subject || s.now().After(at.expires) {
		return oidc.ErrAccessDenied().WithDescription("access token invalid or expired")
	}
	u, err := s.activeUserLocked(at.subject)
	if err != nil {
		return oidc.ErrAccessDenied().WithDescription("user disabled")
	}
	s.fillUserinfo(info, u.User, at.scopes)
	return nil
}

func (s *storage) SetIntrospectionFromToken(_ context.Context, resp *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.accessTokens[tokenID]
	if !ok || at.subject != subject || s.now().After(at.expires) {
		return errors.New("testidp: token inactive")
	}
	if at.clientID != clientID && !slices.Contains(at.audience, clientID) {
		return errors.New("testidp: token not issued to the introspecting client")
	}
	u, err := s.activeUserLocked(at.subject)
	if err != nil {
		return err
	}
	info := new(oidc.UserInfo)
	s.fillUserinfo(info, u.User, at.scopes)
	resp.SetUserInfo(info)
	resp.Scope = at.scopes
	resp.ClientID = at.clientID
	resp.TokenType = oidc.BearerToken
	resp.Expiration = oidc.FromTime(at.expires)
	resp.IssuedAt = oidc.FromTime(at.issued)
	resp.AuthTime = oidc.FromTime(at.authTime)
	resp.Subject = at.subject
	resp.Audience = at.audience
	resp.AuthenticationMethodsReferences = at.amr
	resp.Issuer = s.issuer()
	resp.JWTID = at.id
	resp.Username = u.Username
	return nil
}

// GetPrivateClaimsFromScopes adds tid, oid and roles to JWT access tokens,
// like Entra does.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, userID, _ string, scopes []string) (map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[userID]
	if !ok {
		return nil, nil
	}
	return s.customClaims(u.User, scopes), nil
}

// GetKeyByIDAndClientID refuses: op always routes the RFC 7523 JWT bearer
// grant and private_key_jwt to this method, and testidp offers neither.
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("testidp: JWT profile / private_key_jwt not supported")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, oidc.ErrUnauthorizedClient().WithDescription("JWT profile grant not supported")
}

// Health answers the /ready probe; it fails while the IdP is set down.
func (s *storage) Health(context.Context) error {
	if s.down() {
		return errors.New("testidp: set down")
	}
	return nil
}

func (s *storage) customClaims(u User, scopes []string) map[string]any {
	claims := map[string]any{}
	if s.cfg.TenantID != "" {
		claims["tid"] = s.cfg.TenantID
	}
	if u.ImmutableID != "" {
		claims["oid"] = u.ImmutableID
	}
	if len(u.Roles) > 0 && (s.cfg.RolesScope == "" || slices.Contains(scopes, s.cfg.RolesScope)) {
		claims[s.cfg.RolesClaim] = slices.Clone(u.Roles)
	}
	return claims
}

func (s *storage) fillUserinfo(info *oidc.UserInfo, u User, scopes []string) {
	info.Subject = u.Subject
	for k, v := range s.customClaims(u, scopes) {
		info.AppendClaims(k, v)
	}
	for _, scope := range scopes {
		switch scope {
		case oidc.ScopeProfile:
			info.Name = u.Name
			info.PreferredUsername = u.Username
		case oidc.ScopeEmail:
			info.Email = u.Email
			info.EmailVerified = oidc.Bool(u.EmailVerified)
			if !u.EmailVerified {
				// oidc.UserInfo omits a false email_verified; say it.
				info.AppendClaims("email_verified", false)
			}
		}
	}
}

// ---- login support (used by login.go) ----

// lookupLogin returns a copy of a pending auth request.
func (s *storage) lookupLogin(id string) (*authRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, err := s.authRequestLocked(id)
	if err != nil {
		return nil, err
	}
	return ar.clone(), nil
}

// userByLogin finds a user by username (case-insensitive) or subject.
func (s *storage) userByLogin(login string) (User, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.usernames[strings.ToLower(login)]
	if !ok {
		sub = login
		// A relying party hints the address it knows the person by (alpd's
		// fresh sign-in does), which is the user's email here.
		for id, u := range s.users {
			if u.Email != "" && strings.EqualFold(u.Email, login) {
				sub = id
				break
			}
		}
	}
	u, ok := s.users[sub]
	if !ok {
		return User{}, false, false
	}
	return u.User, true, !u.disabled
}

// checkPassword verifies a login; ok is false for any mismatch.
func (s *storage) checkPassword(username, password string) (u User, ok, enabled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, found := s.usernames[strings.ToLower(username)]
	us := s.users[sub]
	if !found || us == nil || us.Password == "" {
		return User{}, false, false
	}
	if subtle.ConstantTimeCompare([]byte(us.Password), []byte(password)) != 1 {
		return User{}, false, false
	}
	return us.User, true, !us.disabled
}

// newSession starts an SSO session for an enabled user.
func (s *storage) newSession(subject string, amr []string) (*session, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.activeUserLocked(subject); err != nil {
		return nil, err
	}
	se := &session{id: rand.Text() + rand.Text(), subject: subject, authTime: now, amr: amr, expires: now.Add(s.cfg.SessionLifetime)}
	s.sessions[se.id] = se
	return se, nil
}

// lookupSession returns a copy of a live session of an enabled user.
func (s *storage) lookupSession(id string) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.sessions[id]
	if !ok {
		return nil, false
	}
	if s.now().After(se.expires) {
		delete(s.sessions, id)
		return nil, false
	}
	if _, err := s.activeUserLocked(se.subject); err != nil {
		return nil, false
	}
	c := *se
	c.amr = slices.Clone(se.amr)
	return &c, true
}

// completeLogin marks an auth request as authenticated.
func (s *storage) completeLogin(id string, se *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, err := s.authRequestLocked(id)
	if err != nil {
		return err
	}
	if _, err := s.activeUserLocked(se.subject); err != nil {
		return err
	}
	ar.done = true
	ar.subject = se.subject
	ar.authTime = se.authTime
	ar.amr = slices.Clone(se.amr)
	return nil
}

// setDisabled enables or disables a user. Disabling revokes the user's
// refresh and access tokens and SSO sessions for good.
func (s *storage) setDisabled(subject string, disabled bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[subject]
	if !ok {
		return fmt.Errorf("testidp: unknown user %q", subject)
	}
	u.disabled = disabled
	if !disabled {
		return nil
	}
	for tok, rt := range s.refreshTokens {
		if rt.subject == subject {
			delete(s.refreshTokens, tok)
		}
	}
	for id, at := range s.accessTokens {
		if at.subject == subject {
			delete(s.accessTokens, id)
		}
	}
	for id, se := range s.sessions {
		if se.subject == subject {
			delete(s.sessions, id)
		}
	}
	return nil
}

// opClient implements op.Client for a registered Client.
type opClient struct {
	Client
	issuer          string
	idTokenLifetime time.Duration
	rolesScope      string
}

func (c *opClient) GetID() string                    { return c.ID }
func (c *opClient) RedirectURIs() []string           { return c.Client.RedirectURIs }
func (c *opClient) PostLogoutRedirectURIs() []string { return c.Client.RedirectURIs }
func (c *opClient) ApplicationType() op.ApplicationType {
	if c.Public() {
		return op.ApplicationTypeNative
	}
	return op.ApplicationTypeWeb
}
func (c *opClient) AuthMethod() oidc.AuthMethod {
	if c.Public() {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}
func (c *opClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *opClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (c *opClient) LoginURL(id string) string {
	return c.issuer + loginPath + "?" + authRequestParam + "=" + id
}
func (c *opClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *opClient) IDTokenLifetime() time.Duration      { return c.idTokenLifetime }
func (c *opClient) DevMode() bool                       { return false }
func (c *opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// IsScopeAllowed lets Config.RolesScope through op's filter of
// non-standard scopes.
func (c *opClient) IsScopeAllowed(scope string) bool {
	return c.rolesScope != "" && scope == c.rolesScope
}

// IDTokenUserinfoClaimsAssertion puts profile/email claims into the ID token
// even when an access token is issued (as Entra does).
func (c *opClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *opClient) ClockSkew() time.Duration             { return 0 }

var (
	_ op.Storage                   = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest = (*storage)(nil)
	_ op.AuthRequest               = (*authRequest)(nil)
	_ op.RefreshTokenRequest       = (*refreshTokenRequest)(nil)
	_ op.Client                    = (*opClient)(nil)
)
