import type { Transporter } from 'nodemailer';
import type { Logger } from '../../logger';

/**
 * Outgoing mail (decisions §3): over SMTP to `SMTP_URL` in either mode; only when
 * `SMTP_URL` is unset is the mail written to the log instead, so a development setup
 * still gets its reset token.
 */
export interface OutgoingMail {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
  /**
   * What the log may show of this mail when it is written there (no SMTP_URL): the
   * recipient named by a non-personal id and the text without the person's address or name,
   * so an erasure leaves nothing of theirs in the log (decisions §11).
   */
  readonly forLog: { readonly to: string; readonly text: string };
}

export interface Mailer {
  send(mail: OutgoingMail): Promise<void>;
  close(): void;
}

/** Bounds on one delivery, so a stuck SMTP server does not pile up work. */
const SMTP_TIMEOUTS_MS = { connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 20_000 } as const;

/** nodemailer is loaded with the first mail, not at start (it is a large part of loading the service). */
export function createSmtpMailer(smtpUrl: string, from: string): Mailer {
  let transport: Promise<Transporter> | null = null;
  let closed = false;
  // nodemailer parses the URL itself (credentials, smtps:, query options); URL options win.
  const open = (): Promise<Transporter> =>
    (transport ??= import('nodemailer').then(({ createTransport }) => {
      const opened = createTransport({ ...SMTP_TIMEOUTS_MS, url: smtpUrl });
      if (closed) opened.close();
      return opened;
    }));
  return {
    async send(mail) {
      await (await open()).sendMail({ from, to: mail.to, subject: mail.subject, text: mail.text });
    },
    close: () => {
      closed = true;
      void transport?.then((opened) => opened.close());
    },
  };
}

export function createLogMailer(logger: Logger, from: string): Mailer {
  return {
    async send(mail) {
      logger.info({ mail: { from, to: mail.forLog.to, subject: mail.subject, text: mail.forLog.text } }, 'SMTP_URL is not set: mail written to the log instead of sent');
    },
    close: () => undefined,
  };
}
