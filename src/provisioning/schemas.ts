// zod schemas of every operation's params, per variant: the edge where requests become types.
import { z } from 'zod';
import { productCatalogue } from './catalogue.js';

export type Variant = 'marketplace' | 'external';
export const variants = ['marketplace', 'external'] as const;

/**
 * Text that the core stores must be well-formed Unicode: JSON.stringify writes a lone surrogate
 * as `\udXXX`, which Redis's cjson refuses to decode, so such a string would be stored fine and
 * break every later script that reads its record.
 */
export const WELL_FORMED = [
  /^\P{Cs}*$/u,
  'must be well-formed Unicode (no lone surrogates)',
] as const;

/** Caller ids: 1..128 characters without control characters; may hold `:` or be all digits. */
export const callerId = z
  .string()
  .min(1, 'must not be empty')
  .max(128, 'must be at most 128 characters')
  .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters')
  .regex(...WELL_FORMED);

/**
 * The spec only says "string <EMAIL>": any address with one @ and no spaces, as mail systems
 * take them (`a!b@example.com`, `user@localhost`, `ü@bücher.de`), not a narrower pattern.
 */
export const email = z
  .email({ pattern: z.regexes.unicodeEmail, error: 'must be an email address' })
  .max(254, 'must be at most 254 characters')
  .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters')
  .regex(...WELL_FORMED);
/** Hashed as UTF-8, where every lone surrogate is U+FFFD: two such passwords would match. */
const password = z
  .string()
  .min(8, 'must be at least 8 characters')
  .max(128, 'must be at most 128 characters')
  .regex(...WELL_FORMED);
/** 9999-12-31T23:59:59Z: terms after it would leave the calendar a Date can hold. */
export const MAX_EPOCH_SECONDS = 253_402_300_799;
export const epochSeconds = z
  .int('must be an integer (epoch seconds)')
  .min(0, 'must not be negative')
  .max(MAX_EPOCH_SECONDS, 'must be at most 253402300799 (9999-12-31T23:59:59Z)');
export const licenses = z
  .int('must be an integer')
  .min(1, 'must be at least 1')
  .max(100_000, 'must be at most 100000');
export const duration = z.enum(['monthly', 'yearly'], 'must be "monthly" or "yearly"');
const name = z
  .string()
  .min(1, 'must not be empty')
  .max(200, 'must be at most 200 characters')
  .regex(...WELL_FORMED);

const idOnly = z.strictObject({ id: callerId });

function instanceOf(variant: Variant) {
  return variant === 'marketplace'
    ? z
        .string('must be a string (marketplace instance id)')
        .min(1, 'must not be empty')
        .max(128, 'must be at most 128 characters')
        .regex(...WELL_FORMED)
    : z.int('must be an integer (external instance id)').min(1, 'must be at least 1');
}

function commonSchemas(variant: Variant) {
  const users = {
    createUser: z.strictObject({
      email,
      password,
      instance: instanceOf(variant),
      displayName: name.optional(),
    }),
    updateUserByEmail: z.strictObject({ email, isActive: z.boolean('must be a boolean') }),
    resetPasswordByEmail: z.strictObject({ email, password }),
    getUserByEmail: z.strictObject({ email }),
  };
  const createCustomer = z.strictObject({
    id: callerId,
    name,
    admin: z.strictObject(
      {
        email,
        phone: z
          .string()
          .max(64, 'must be at most 64 characters')
          .regex(...WELL_FORMED)
          .optional(),
        displayName: name.optional(),
      },
      'must be an object with email',
    ),
  });
  return { ...users, createCustomer, cancelOrder: idOnly, suspendOrder: idOnly };
}

function productOf(brand: string) {
  const products = productCatalogue(brand);
  return z.enum(products, { error: `must be one of ${products.join(', ')}` });
}

/** The params schemas of every operation the marketplace variant offers. */
export function marketplaceSchemas(brand: string) {
  return {
    ...commonSchemas('marketplace'),
    createOrder: z
      .strictObject({
        customer: callerId,
        id: callerId,
        product: productOf(brand),
        licenses,
        duration: duration.optional(),
        startsAt: epochSeconds.optional(),
        expiresAt: epochSeconds.optional(),
        parent: callerId.optional(),
      })
      // Also when another field is bad: a message names each bad field at once.
      .superRefine(checkOrderForm, { when: ({ value }) => isRecord(value) }),
    unsuspendOrder: idOnly,
  };
}

/** The params schemas of every operation the external variant offers. */
export function externalSchemas(brand: string) {
  return {
    ...commonSchemas('external'),
    createFirstOrder: z.strictObject({
      customer: callerId,
      id: callerId,
      product: productOf(brand),
      licenses,
      duration,
    }),
    createRenewalOrder: z.strictObject({
      parent: callerId,
      id: callerId,
      licenses: licenses.optional(),
    }),
  };
}

export type MarketplaceSchemas = ReturnType<typeof marketplaceSchemas>;
export type ExternalSchemas = ReturnType<typeof externalSchemas>;
export type MarketplaceMethod = keyof MarketplaceSchemas;
export type ExternalMethod = keyof ExternalSchemas;
export type Method = MarketplaceMethod | ExternalMethod;

export type CreateUserParams =
  | z.infer<MarketplaceSchemas['createUser']>
  | z.infer<ExternalSchemas['createUser']>;
export type UpdateUserParams = z.infer<MarketplaceSchemas['updateUserByEmail']>;
export type ResetPasswordParams = z.infer<MarketplaceSchemas['resetPasswordByEmail']>;
export type GetUserParams = z.infer<MarketplaceSchemas['getUserByEmail']>;
export type CreateCustomerParams = z.infer<MarketplaceSchemas['createCustomer']>;
export type CreateOrderParams = z.infer<MarketplaceSchemas['createOrder']>;
export type CreateFirstOrderParams = z.infer<ExternalSchemas['createFirstOrder']>;
export type CreateRenewalOrderParams = z.infer<ExternalSchemas['createRenewalOrder']>;
export type OrderIdParams = z.infer<typeof idOnly>;

/**
 * The fields the order form depends on. Checked also when other fields failed, so their own
 * values may be of any type (their own schemas name those).
 */
interface OrderFormFields {
  duration?: unknown;
  startsAt?: unknown;
  expiresAt?: unknown;
  parent?: unknown;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The three forms of createOrder: simple, controlled start, partial (no duration). */
function checkOrderForm(p: OrderFormFields, ctx: z.RefinementCtx): void {
  if (p.duration === undefined) {
    if (p.startsAt === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['startsAt'],
        message: 'is required in a partial order (no duration)',
      });
    }
    if (p.expiresAt === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['expiresAt'],
        message: 'is required in a partial order (no duration)',
      });
    }
    if (p.parent !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['parent'],
        message: 'is not allowed in a partial order (no duration)',
      });
    }
  } else if (p.expiresAt !== undefined) {
    ctx.addIssue({
      code: 'custom',
      path: ['expiresAt'],
      message: 'is only allowed in a partial order (without duration); a term ends by its duration',
    });
  }
  if (
    typeof p.startsAt === 'number' &&
    typeof p.expiresAt === 'number' &&
    p.expiresAt <= p.startsAt
  ) {
    ctx.addIssue({
      code: 'custom',
      path: ['expiresAt'],
      message: `must be after startsAt (${p.startsAt}), got ${p.expiresAt}`,
    });
  }
}
