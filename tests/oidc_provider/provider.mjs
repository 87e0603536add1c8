// A real OpenID provider for the single sign-on tests: node-oidc-provider (the certified
// implementation) on 127.0.0.1, with one client, a fixed set of accounts and a plain login
// page of its own, so tests/oidc_provider.py can sign in with httpx (posting the form) and a
// browser test can sign in through the same page in Chromium.
//
//   node provider.mjs '{"port": 0, "client": {...}, "accounts": [...], "claims_in_id_token": false}'
//
// (or the same JSON in OIDC_PROVIDER_OPTIONS). port 0, the default, lets the system pick a
// free one; the issuer is http://127.0.0.1:<port>, printed as "ready <issuer>" once listening.
// client: {client_id, client_secret (absent: a public client), redirect_uris}. accounts:
// [{sub, email, email_verified, name, groups, password}]; the login form takes the sub or
// the e-mail, and the password when the account has one. PKCE is required of every client
// and consent is implied (the desk is a first-party client): the login page is the only one.
// claims_in_id_token puts the e-mail, profile and groups claims in the ID token; by default
// they are only in the userinfo answer, as a strictly conforming provider does in the code
// flow. Nothing here reaches beyond this machine: the pages load no fonts, scripts or images.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const options = JSON.parse(process.argv[2] ?? process.env.OIDC_PROVIDER_OPTIONS ?? '{}');
const { client } = options;
if (!client?.client_id || !Array.isArray(client.redirect_uris)) {
  console.error('provider.mjs: options.client needs client_id and redirect_uris');
  process.exit(2);
}
const accounts = (options.accounts ?? []).map((account) => ({ ...account }));
const CLAIMS = ['sub', 'email', 'email_verified', 'name', 'groups'];

function findByLogin(login) {
  const wanted = String(login ?? '').trim().toLowerCase();
  return accounts.find((a) => a.sub.toLowerCase() === wanted || (a.email ?? '').toLowerCase() === wanted);
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<style>body{font-family:sans-serif;max-width:22rem;margin:3rem auto}label,input,button{display:block;width:100%;margin:.3rem 0}
.error{color:#b00020}</style></head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`;
}

function loginPage(uid, clientId, error, login) {
  return page('Test provider sign-in', `
<p>Signing in to <strong>${escapeHtml(clientId)}</strong>.</p>
${error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}">
  <label for="login">Account (id or e-mail)</label>
  <input id="login" name="login" required autofocus value="${escapeHtml(login ?? '')}">
  <label for="password">Password</label>
  <input id="password" name="password" type="password">
  <button type="submit">Sign in</button>
</form>
<form method="post" action="/interaction/${escapeHtml(uid)}/abort"><button type="submit">Cancel</button></form>`);
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

const server = createServer();
await new Promise((resolve) => server.listen(Number(options.port ?? process.env.PORT ?? 0), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

// A fresh signing key each start: the relying party must read it from jwks_uri.
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
  clients: [{
    client_id: client.client_id,
    ...(client.client_secret ? { client_secret: client.client_secret } : { token_endpoint_auth_method: 'none' }),
    redirect_uris: client.redirect_uris,
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
  conformIdTokenClaims: !options.claims_in_id_token,
  features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const account = accounts.find((a) => a.sub === sub);
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims() {
        return Object.fromEntries(CLAIMS.filter((name) => account[name] !== undefined).map((name) => [name, account[name]]));
      },
    };
  },
  // First-party client: whatever it asks for is granted, so no consent page is shown.
  async loadExistingGrant(ctx) {
    const { session, client: asking, provider: op } = ctx.oidc;
    if (!session?.accountId) return undefined;
    const grantId = ctx.oidc.result?.consent?.grantId || session.grantIdFor(asking.clientId);
    const grant = (grantId && await op.Grant.find(grantId)) || new op.Grant({ clientId: asking.clientId, accountId: session.accountId });
    grant.addOIDCScope([...ctx.oidc.requestParamScopes].join(' '));
    grant.addOIDCClaims([...ctx.oidc.requestParamClaims]);
    await grant.save();
    return grant;
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = page('Sign-in failed', Object.entries(out).map(([k, v]) => `<p><strong>${escapeHtml(k)}</strong>: ${escapeHtml(v)}</p>`).join(''));
  },
});

// The login page and its two posts: sign in as an account, or cancel (access_denied).
provider.use(async (ctx, next) => {
  const match = /^\/interaction\/([\w-]+)(\/abort)?$/.exec(ctx.path);
  if (!match) return next();
  ctx.set('Cache-Control', 'no-store');
  const [, uid, abort] = match;
  let details;
  try {
    details = await provider.interactionDetails(ctx.req, ctx.res);
  } catch (error) {
    ctx.status = 400;
    ctx.type = 'html';
    ctx.body = page('Sign-in failed', `<p>${escapeHtml(error.message)}</p>`);
    return undefined;
  }
  if (details.uid !== uid || details.prompt.name !== 'login') {
    ctx.status = 400;
    ctx.type = 'html';
    ctx.body = page('Sign-in failed', `<p>This page expected a login, not ${escapeHtml(details.prompt.name)}.</p>`);
    return undefined;
  }
  const clientId = details.params.client_id;
  if (ctx.method === 'GET' && !abort) {
    ctx.type = 'html';
    ctx.body = loginPage(uid, clientId, null, details.params.login_hint);
    return undefined;
  }
  if (ctx.method !== 'POST') {
    ctx.status = 405;
    return undefined;
  }
  const form = await readForm(ctx.req);
  let result;
  if (abort) {
    result = { error: 'access_denied', error_description: 'the person cancelled the sign-in' };
  } else {
    const account = findByLogin(form.get('login'));
    if (!account || (account.password !== undefined && account.password !== form.get('password'))) {
      ctx.status = 401;
      ctx.type = 'html';
      ctx.body = loginPage(uid, clientId, 'Unknown account or wrong password.', form.get('login'));
      return undefined;
    }
    result = { login: { accountId: account.sub } };
  }
  const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });
  ctx.redirect(returnTo);
  ctx.status = 303;
  return undefined;
});

for (const event of ['server_error', 'authorization.error', 'grant.error', 'userinfo.error']) {
  provider.on(event, (ctx, error) => console.error(`${event}: ${error?.name}: ${error?.message} ${error?.error_detail ?? ''}`));
}

server.on('request', provider.callback());
process.on('SIGTERM', () => process.exit(0));
console.log(`ready ${issuer}`);
