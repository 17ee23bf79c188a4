// Package auth verifies bearer JWTs and decides what a token's roles may do.
// Roles are a set, not a ladder: write-only may push but not read,
// read-only may read but not push or pop (http-api-v1.md §1.1).
package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Roles a token may carry.
const (
	RoleReadOnly  = "read-only"
	RoleWriteOnly = "write-only"
	RoleReadWrite = "read-write"
	RoleAdmin     = "admin"
)

// The fixed 401 messages.
const (
	MsgAuthRequired = "Authentication required"
	MsgBadHeader    = "Bad token header"
	MsgBadSignature = "Invalid token signature"
	MsgExpired      = "Token has expired"
	// MsgNoExpiry refuses a token without exp, which would be valid for ever
	// (unless Config.AllowNoExpiry).
	MsgNoExpiry       = "Token has no expiration time (exp claim required)"
	MsgNotYetValid    = "Token not yet valid"
	MsgIssuedInFuture = "Token issued in the future"
	MsgBadIssuer      = "Invalid token issuer"
	MsgBadAudience    = "Invalid token audience"
	MsgUnsupportedAlg = "Unsupported token algorithm"
	MsgUnknownKeyID   = "Unknown key ID"
	MsgForbidden      = "Insufficient permissions"
)

// Config is the verifier's key material and checks.
type Config struct {
	// Algorithm is "auto" (every algorithm the configured keys can verify) or one name such as HS256.
	Algorithm string
	// Secret verifies HS256/384/512.
	Secret []byte
	// PublicKey is a PEM public key (RSA, ECDSA or Ed25519), or a path to one.
	PublicKey string
	Issuer    string
	Audience  string
	// Leeway tolerates clock skew on exp, nbf and iat.
	Leeway time.Duration
	// AllowNoExpiry accepts tokens without an exp claim. Off by default: such
	// a token never expires, so a leaked one works until the key is rotated.
	AllowNoExpiry bool

	// JWKSURLs are JSON Web Key Sets whose keys verify the asymmetric tokens
	// that name a kid (and those without one when PublicKey is unset), a kid
	// being looked up in every set. HMAC tokens are always verified with
	// Secret: the sets' shared keys are never used.
	JWKSURLs []string
	// JWKSRefresh is how often each set is fetched again; a key dropped from it stops verifying.
	JWKSRefresh time.Duration
	// JWKSUnknownKIDRefresh is the least time between two fetches of one set
	// caused by tokens naming a kid no set holds.
	JWKSUnknownKIDRefresh time.Duration
	// JWKSTimeout bounds one fetch, the one at startup too.
	JWKSTimeout time.Duration
	// Logger receives the failed fetches of the sets.
	Logger *slog.Logger

	// RoleClaims are the claims a token's roles are read from, each one
	// string or an array of them; empty means role and roles. An entry
	// starting with "/" is a JSON Pointer into the claims (/realm_access/roles),
	// any other a top-level claim name as written (https://example.com/roles).
	RoleClaims []string
	// RoleNames maps a role (RoleAdmin, …) to the name tokens carry for it;
	// a role left out is carried under its own name.
	RoleNames map[string]string
	// SkipPaths need no token, besides PublicPaths: an entry ending in "/"
	// covers every path under it, any other entry (and "/") only itself.
	SkipPaths []string
}

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	cfg        Config
	methods    []string
	pub        crypto.PublicKey
	jwks       keySets // empty without Config.JWKSURLs
	parser     *jwt.Parser
	roleClaims []roleClaim
	// roleOf maps the name a token carries to the role it grants.
	roleOf    map[string]string
	skipExact []string
	skipUnder []string
}

// NewVerifier checks the key material and builds the parser. With JWKS URLs
// it fetches each set once (all at once, waiting at most Config.JWKSTimeout; an
// endpoint that is down leaves its set empty) and keeps them fresh until Close.
func NewVerifier(cfg Config) (*Verifier, error) {
	v := &Verifier{cfg: cfg}
	if err := v.readRolesAndPaths(); err != nil {
		return nil, err
	}
	if cfg.PublicKey != "" {
		pemText := []byte(cfg.PublicKey)
		if !strings.Contains(cfg.PublicKey, "-----BEGIN") {
			b, err := os.ReadFile(cfg.PublicKey)
			if err != nil {
				// The value may be a secret set here by mistake: say why, never what.
				var pathErr *fs.PathError
				if errors.As(err, &pathErr) {
					err = pathErr.Err
				}
				return nil, fmt.Errorf("jwt public key (LANES_JWT_PUBLIC_KEY): neither PEM text (-----BEGIN …) nor a file that can be read: %w", err)
			}
			pemText = b
		}
		pub, err := parsePublicKey(pemText)
		if err != nil {
			return nil, err
		}
		v.pub = pub
	}
	var usable []string
	if len(cfg.Secret) > 0 {
		usable = append(usable, "HS256", "HS384", "HS512")
	}
	switch v.pub.(type) {
	case *rsa.PublicKey:
		usable = append(usable, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
	case *ecdsa.PublicKey:
		usable = append(usable, "ES256", "ES384", "ES512")
	case ed25519.PublicKey:
		usable = append(usable, "EdDSA")
	}
	if len(cfg.JWKSURLs) > 0 {
		for _, alg := range asymmetricAlgs {
			if !slices.Contains(usable, alg) {
				usable = append(usable, alg)
			}
		}
	}
	if len(usable) == 0 {
		return nil, errors.New("jwt enabled but none of LANES_JWT_SECRET, LANES_JWT_PUBLIC_KEY and LANES_JWT_JWKS_URL is set")
	}
	switch alg := cfg.Algorithm; {
	case alg == "" || strings.EqualFold(alg, "auto"):
		v.methods = usable
	case slices.Contains(usable, alg):
		v.methods = []string{alg}
	default:
		return nil, fmt.Errorf("jwt algorithm %q (LANES_JWT_ALGORITHM) does not match the configured key (usable: %s)", alg, strings.Join(usable, ", "))
	}
	opts := []jwt.ParserOption{jwt.WithIssuedAt(), jwt.WithLeeway(cfg.Leeway)}
	if !cfg.AllowNoExpiry {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	if len(cfg.JWKSURLs) > 0 {
		jwks, err := newKeySets(cfg)
		if err != nil {
			return nil, err
		}
		v.jwks = jwks
	}
	return v, nil
}

// asymmetricAlgs are the algorithms a JWKS may verify.
var asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Close stops fetching the key sets.
func (v *Verifier) Close() {
	v.jwks.close()
}

// KeySets is what each key set's fetches left, in the order of Config.JWKSURLs.
func (v *Verifier) KeySets() []KeySetStatus {
	return v.jwks.statuses()
}

// readRolesAndPaths checks the claim names, role names and skip paths.
func (v *Verifier) readRolesAndPaths() error {
	entries := v.cfg.RoleClaims
	if len(entries) == 0 {
		entries = []string{"role", "roles"}
	}
	for _, entry := range entries {
		claim, err := parseRoleClaim(entry)
		if err != nil {
			return fmt.Errorf("jwt %w", err)
		}
		v.roleClaims = append(v.roleClaims, claim)
	}
	v.roleOf = map[string]string{}
	for _, role := range allRoles {
		name := role
		if configured, ok := v.cfg.RoleNames[role]; ok {
			name = configured
		}
		if name == "" {
			return fmt.Errorf("jwt role %s: its name in tokens is empty", role)
		}
		if other, taken := v.roleOf[name]; taken {
			return fmt.Errorf("jwt roles %s and %s are both named %q in tokens: each role needs its own name", other, role, name)
		}
		v.roleOf[name] = role
	}
	for role := range v.cfg.RoleNames {
		if !slices.Contains(allRoles, role) {
			return fmt.Errorf("jwt role %q: not a role (read-only, write-only, read-write, admin)", role)
		}
	}
	for _, p := range v.cfg.SkipPaths {
		switch {
		case !strings.HasPrefix(p, "/"):
			return fmt.Errorf("jwt skip path %q: must start with /", p)
		case p != "/" && strings.HasSuffix(p, "/"):
			v.skipUnder = append(v.skipUnder, p)
		default:
			v.skipExact = append(v.skipExact, p)
		}
	}
	return nil
}

var allRoles = []string{RoleReadOnly, RoleWriteOnly, RoleReadWrite, RoleAdmin}

// Skips reports whether a skip path opens path: it names path exactly or,
// ending in "/", is a prefix of it. "/" is exact only, so it never opens the
// whole API. (PublicPaths are public whatever the skip paths say.)
func (v *Verifier) Skips(path string) bool {
	if slices.Contains(v.skipExact, path) {
		return true
	}
	for _, prefix := range v.skipUnder {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

func parsePublicKey(pemText []byte) (crypto.PublicKey, error) {
	if k, err := jwt.ParseRSAPublicKeyFromPEM(pemText); err == nil {
		return k, nil
	}
	if k, err := jwt.ParseEdPublicKeyFromPEM(pemText); err == nil {
		return k, nil
	}
	if k, err := jwt.ParseECPublicKeyFromPEM(pemText); err == nil {
		return k, nil
	}
	return nil, errors.New("jwt public key (LANES_JWT_PUBLIC_KEY): not an RSA, ECDSA or Ed25519 public key in PEM")
}

// Identity is what a verified token says about its bearer.
type Identity struct {
	Subject string
	Roles   []string
}

// Error is a 401 with one of the fixed messages.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

// Challenge is the WWW-Authenticate value of the 401 (RFC 6750 §3.1): a bare
// Bearer challenge when the request sent no token, which carries no error
// code; else invalid_token, described by the same fixed message as the body.
func (e *Error) Challenge() string {
	if e.Message == MsgAuthRequired {
		return "Bearer"
	}
	return bearerError("invalid_token", e.Message)
}

// ForbiddenChallenge is the WWW-Authenticate value of the 403 for a token
// without the route's role: RFC 6750 names it insufficient_scope.
var ForbiddenChallenge = bearerError("insufficient_scope", MsgForbidden)

// bearerError is a Bearer challenge naming an error; the description is
// left out unless RFC 6750 §3 admits it inside quotes as it is.
func bearerError(code, description string) string {
	challenge := `Bearer error="` + code + `"`
	if quotable(description) {
		challenge += `, error_description="` + description + `"`
	}
	return challenge
}

// quotable reports whether s is all %x20-21 / %x23-5B / %x5D-7E, the
// characters RFC 6750 §3 allows in error_description: no quote, no backslash.
func quotable(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return s != ""
}

var errUnsupportedAlg = errors.New("unsupported token algorithm")

// Verify checks a request's Authorization header values, each "Bearer <jwt>"
// or a bare token. A request must send one: with two, a proxy in front could
// have checked the other one (RFC 9110 §11.6.2 allows one credential).
func (v *Verifier) Verify(headers ...string) (*Identity, *Error) {
	if len(headers) > 1 {
		return nil, &Error{MsgBadHeader}
	}
	raw := ""
	if len(headers) == 1 {
		raw = strings.TrimSpace(headers[0])
	}
	if raw == "" {
		return nil, &Error{MsgAuthRequired}
	}
	if len(raw) > 7 && strings.EqualFold(raw[:7], "bearer ") {
		raw = strings.TrimSpace(raw[7:])
	}
	claims := jwt.MapClaims{}
	token, err := v.parser.ParseWithClaims(raw, claims, v.key)
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		// A key set may have rotated in a key under a kid another set, or
		// itself, already held: verify again once the sets are fetched.
		claimsAgain := jwt.MapClaims{}
		if tokenAgain, errAgain := v.parser.ParseWithClaims(raw, claimsAgain, v.keyFetchedAgain); !errors.Is(errAgain, errNoNewKeys) {
			token, claims, err = tokenAgain, claimsAgain, errAgain
		}
	}
	if err != nil {
		if namesUnknownAlg(token, err) {
			return nil, &Error{MsgUnsupportedAlg}
		}
		return nil, &Error{v.messageFor(err, claims)}
	}
	// RFC 7515 §4.1.11: a token whose "crit" header names extensions the
	// verifier does not understand must be refused, and this one understands none.
	if _, critical := token.Header["crit"]; critical {
		return nil, &Error{MsgBadHeader}
	}
	id := &Identity{}
	id.Subject, _ = claims["sub"].(string)
	for _, claim := range v.roleClaims {
		for _, carried := range namesIn(claim.in(claims)) {
			if role, ok := v.roleOf[carried]; ok {
				id.Roles = append(id.Roles, role)
			}
		}
	}
	return id, nil
}

// namesIn reads a role claim that is one string or an array of them: issuers
// write a single-valued claim either way, as RFC 7519 does for aud.
func namesIn(claim any) []string {
	switch c := claim.(type) {
	case string:
		if c != "" {
			return []string{c}
		}
	case []any:
		var names []string
		for _, r := range c {
			if s, ok := r.(string); ok && s != "" {
				names = append(names, s)
			}
		}
		return names
	}
	return nil
}

// key picks the key for t: the secret for HMAC; the JWKS keys named by kid
// when there are key sets; else the static public key, or every JWKS key that
// fits the algorithm.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if !slices.Contains(v.methods, alg) {
		return nil, errUnsupportedAlg
	}
	if strings.HasPrefix(alg, "HS") {
		return v.cfg.Secret, nil
	}
	kidClaim, namesKID := t.Header["kid"]
	if len(v.jwks) > 0 && namesKID {
		kid, ok := kidClaim.(string)
		if !ok || kid == "" {
			return nil, errBadKID
		}
		return v.jwks.key(kid, alg)
	}
	if v.pub != nil && algFits(alg, v.pub) {
		return v.pub, nil
	}
	if len(v.jwks) > 0 {
		keys := v.jwks.keysFor(alg)
		if len(keys) == 0 {
			return nil, errNoKey
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	}
	return nil, errUnsupportedAlg
}

// keyFetchedAgain is key for a token no key verified, after fetching the key
// sets again when its kid named keys of theirs: errNoNewKeys when no set was
// fetched, or its key was not a key set's.
func (v *Verifier) keyFetchedAgain(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	if len(v.jwks) == 0 || kid == "" || strings.HasPrefix(alg, "HS") {
		return nil, errNoNewKeys
	}
	return v.jwks.keyFetchedAgain(kid, alg)
}

var (
	errBadKID = errors.New("kid is not a string")
	errNoKey  = errors.New("no key of the token's algorithm")
)

// namesUnknownAlg reports a token refused because its header names an
// algorithm the JWT library does not know ("None", "HS999"): it is as
// unsupported as a known one the broker does not allow.
func namesUnknownAlg(token *jwt.Token, err error) bool {
	if token == nil || !errors.Is(err, jwt.ErrTokenUnverifiable) || token.Method != nil {
		return false
	}
	alg, named := token.Header["alg"].(string)
	return named && alg != ""
}

// messageFor picks the fixed 401 message for a parse or validation error.
// golang-jwt reports a required exp, iss or aud that is absent as a missing
// claim; the claims (decoded once the signature verified) tell which one it
// was, so a missing iss or aud answers as a wrong one and a missing exp says so.
func (v *Verifier) messageFor(err error, claims jwt.MapClaims) string {
	missing := errors.Is(err, jwt.ErrTokenRequiredClaimMissing)
	switch {
	case errors.Is(err, errUnsupportedAlg):
		return MsgUnsupportedAlg
	case errors.Is(err, errUnknownKID):
		return MsgUnknownKeyID
	case errors.Is(err, errNoKey):
		return MsgBadSignature
	case errors.Is(err, jwt.ErrTokenMalformed):
		return MsgBadHeader
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return MsgBadSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return MsgExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return MsgNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return MsgIssuedInFuture
	case missing && !v.cfg.AllowNoExpiry && lacksExpiry(claims):
		return MsgNoExpiry
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), missing && v.cfg.Issuer != "" && lacks(claims.GetIssuer):
		return MsgBadIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience), missing && v.cfg.Audience != "" && lacksAudience(claims):
		return MsgBadAudience
	default:
		return MsgBadHeader
	}
}

// lacks reports whether a string claim is absent or empty, as the validator
// decides when it calls a required claim missing.
func lacks(get func() (string, error)) bool {
	s, err := get()
	return err == nil && s == ""
}

// lacksExpiry reports whether exp is absent, as the validator decides when it
// calls a required exp missing.
func lacksExpiry(claims jwt.MapClaims) bool {
	exp, err := claims.GetExpirationTime()
	return err == nil && exp == nil
}

// lacksAudience reports whether aud is absent, empty or [""], as the validator
// decides when it calls a required aud missing.
func lacksAudience(claims jwt.MapClaims) bool {
	aud, err := claims.GetAudience()
	return err == nil && (len(aud) == 0 || len(aud) == 1 && aud[0] == "")
}

type identityKey struct{}

// WithIdentity attaches the verified identity to a request context.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity of the request, or nil when auth is off.
func FromContext(ctx context.Context) *Identity {
	id, _ := ctx.Value(identityKey{}).(*Identity)
	return id
}
