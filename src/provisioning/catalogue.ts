// The product catalogue: three suite products under the configured brand, three ERP products.

export function productCatalogue(brand: string): readonly [string, ...string[]] {
  return [`${brand}-lite`, `${brand}-std`, `${brand}-ent`, 'erp-std', 'erp-admin', 'erp-lim'];
}
