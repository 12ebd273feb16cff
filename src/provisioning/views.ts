// The response shapes of the spec: records in, exactly the spec's fields out.

import type { CustomerRecord, OrderRecord, UserRecord } from './records.js';
import type { Variant } from './schemas.js';

const braces = (values: readonly number[]) => `{${values.join(',')}}`;

function folders(u: UserRecord) {
  return {
    rootFiles: u.rootFiles,
    trashFiles: u.trashFiles,
    inbox: u.inbox,
    spam: u.spam,
    sent: u.sent,
    trashEmail: u.trashEmail,
    drafts: u.drafts,
    mainCalendar: u.mainCalendar,
  };
}

function userValues(u: UserRecord) {
  return { notificationReminder: u.notificationReminder, timezone: null, editorTemplates: null };
}

const emptyProfile = () => ({
  uid: null,
  title: null,
  department: null,
  location: null,
  grade: null,
  phones: [],
});

/** The createUser response: settings and apps as brace strings, no instance or isActive. */
export function userCreateView(u: UserRecord) {
  return {
    id: u.id,
    email: u.email,
    displayName: u.displayName,
    settings: braces(u.settings),
    apps: braces(u.apps),
    values: userValues(u),
    profile: emptyProfile(),
    isAdmin: u.isAdmin,
    createdAt: u.createdAt,
    ...folders(u),
  };
}

/** The getUserByEmail response: arrays, instance, flags, and an empty token. */
export function userReadView(u: UserRecord, isActive: boolean) {
  return {
    id: u.id,
    instance: u.instance,
    email: u.email,
    displayName: u.displayName,
    avatar: '',
    groups: [],
    settings: [...u.settings],
    apps: [...u.apps],
    values: userValues(u),
    profile: emptyProfile(),
    isActive,
    isAdmin: u.isAdmin,
    isSysAdmin: u.isSysAdmin,
    ...folders(u),
    token: '',
    tokenExpiresAt: 0,
  };
}

export function customerView(c: CustomerRecord, variant: Variant) {
  const view = {
    name: c.name,
    partner: c.partner,
    createdAt: c.createdAt,
    id: c.id,
    isActive: c.isActive,
    admin: { email: c.admin.email },
    remoteId: c.remoteId,
  };
  return variant === 'marketplace' ? { ...view, url: c.url ?? '' } : view;
}

/** Marketplace order responses show `instance: null`, as the spec shows them. */
export function orderView(o: OrderRecord, variant: Variant) {
  return {
    id: o.id,
    customer: o.customer,
    instance: variant === 'marketplace' ? null : o.instance,
    product: o.product,
    licenses: o.licenses,
    duration: o.duration,
    count: o.count,
    createdAt: o.createdAt,
    startsAt: o.startsAt,
    expiresAt: o.expiresAt,
    remoteId: o.remoteId,
  };
}

export type OrderView = ReturnType<typeof orderView>;
export type CustomerView = ReturnType<typeof customerView>;
