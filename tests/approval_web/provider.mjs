// A real OpenID provider (npm's oidc-provider) for tests/integration/approval_web.rs, on
// 127.0.0.1. Settings from the environment:
//   OIDC_PORT      the port to listen on
//   OIDC_REDIRECT  the one redirect URI of the one client, `querygate-approvals` (public: PKCE)
//   OIDC_KEY_FILE  a PKCS#8 PEM EC P-256 private key: ID tokens are ES256 with kid `k1`
//   OIDC_ACCOUNTS  JSON {"<login>": {"tenant": …, "groups": […]}}: who may sign in (any password)
// Prints `ready <issuer>` once it listens.
import { readFileSync } from 'node:fs';
import { createPrivateKey } from 'node:crypto';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS);
const jwk = createPrivateKey(readFileSync(process.env.OIDC_KEY_FILE)).export({ format: 'jwk' });

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'querygate-approvals',
    token_endpoint_auth_method: 'none',
    redirect_uris: [process.env.OIDC_REDIRECT],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    id_token_signed_response_alg: 'ES256',
  }],
  jwks: { keys: [{ ...jwk, kid: 'k1', alg: 'ES256', use: 'sig' }] },
  cookies: { keys: ['querygate-test-cookie-key-0123456789'] },
  claims: { openid: ['sub', 'tenant', 'groups'] },
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  async findAccount(_ctx, id) {
    const account = accounts[id];
    if (!account) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...account }; } };
  },
});
provider.on('server_error', (_ctx, err) => console.error('provider error:', err));

createServer(provider.callback()).listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
