import { api, createUser, type TestService } from './harness';
import type { ReceivedMail, TestSmtpServer } from './smtp';

/** The reset token in a reset mail: `<userId>.<43 base64url characters>` on a line of its own. */
export function resetTokenIn(text: string): string {
  const match = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[A-Za-z0-9_-]{43})$/m.exec(text);
  if (match?.[1] === undefined) throw new Error(`no reset token in:\n${text}`);
  return match[1];
}

/** Asks for a reset of `email` and returns the token from the mail the SMTP server received. */
export async function requestResetToken(service: Pick<TestService, 'baseUrl'>, smtp: TestSmtpServer, email: string): Promise<{ token: string; mail: ReceivedMail }> {
  const seen = smtp.mails().filter((mail) => mail.to.includes(email)).length;
  const res = await api(service, 'POST', '/auth/password-reset/request', { body: { email } });
  if (res.status !== 202) throw new Error(`password-reset/request answered ${res.status}: ${JSON.stringify(res.body)}`);
  const mail = await smtp.waitForMail(email, { skip: seen });
  return { token: resetTokenIn(mail.text), mail };
}

export interface Account {
  readonly id: string;
  readonly email: string;
  readonly password: string;
}

/** A CRM user who then set a password through the reset flow, as a real user would. */
export async function createAccount(
  service: TestService,
  smtp: TestSmtpServer,
  fields: { email?: string; firstName?: string; lastName?: string; password?: string } = {},
): Promise<Account> {
  const user = await createUser(service, fields);
  const password = fields.password ?? `pw-${Math.random().toString(36).slice(2)}-Secret!`;
  const { token } = await requestResetToken(service, smtp, user.email);
  const res = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } });
  if (res.status !== 200) throw new Error(`password-reset/confirm answered ${res.status}: ${JSON.stringify(res.body)}`);
  return { id: user.id, email: user.email, password };
}

export interface LoginBody {
  readonly accessToken: string;
  readonly refreshToken: string;
  readonly expiresIn: number;
  readonly user: { readonly id: string; readonly email: string; readonly firstName: string; readonly lastName: string; readonly role: string };
}

export async function login(service: TestService, email: string, password: string): Promise<LoginBody> {
  const res = await api(service, 'POST', '/auth/login', { body: { email, password } });
  if (res.status !== 201) throw new Error(`login answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body as LoginBody;
}

/** Every event in the service's store, read through a catch-up subscription. */
export async function allEvents(service: TestService): Promise<Array<{ streamName: string; type: string; data: unknown; metadata: unknown }>> {
  const events: Array<{ streamName: string; type: string; data: unknown; metadata: unknown }> = [];
  const subscription = service.eventStore.subscribe();
  try {
    for await (const item of subscription) {
      if (item.kind === 'caught-up') break;
      const { streamName, type, data, metadata } = item.event;
      events.push({ streamName, type, data, metadata });
    }
  } finally {
    await subscription.close();
  }
  return events;
}
