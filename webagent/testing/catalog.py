"""The dynamic pages of the local task sites: the catalog's products, search and product pages,
and the registration form's validation and confirmation (served by ``SiteServer``)."""

from __future__ import annotations

import html
from dataclasses import dataclass

__all__ = [
    "COUNTRIES",
    "PRODUCTS",
    "PRODUCTS_BY_ID",
    "Product",
    "page",
    "page_facts",
    "reference_code",
    "render_confirmation",
    "render_form_errors",
    "render_product",
    "render_product_missing",
    "render_search",
    "search_products",
    "validate_registration",
]


@dataclass(frozen=True)
class Product:
    id: str
    name: str
    cents: int
    blurb: str

    @property
    def price(self) -> str:
        return f"${self.cents // 100}.{self.cents % 100:02d}"


PRODUCTS: tuple[Product, ...] = (
    Product("blue-widget", "Blue Widget", 1250, "A sturdy all-purpose widget in ocean blue."),
    Product("red-gadget", "Red Gadget", 1999, "A bright red gadget with two speed settings."),
    Product("green-widget", "Green Widget", 875, "A compact widget made from recycled plastic."),
    Product("yellow-gizmo", "Yellow Gizmo", 2300, "A cheerful gizmo that hums when switched on."),
    Product("blue-gadget", "Blue Gadget", 3140, "The deluxe gadget, now in midnight blue."),
    Product("silver-sprocket", "Silver Sprocket", 525, "A precision sprocket with 24 teeth."),
    Product("purple-doohickey", "Purple Doohickey", 1410, "Nobody knows what it does, everybody wants one."),
    Product("orange-widget-deluxe", "Orange Widget Deluxe", 4200, "Our largest widget, lifetime warranty."),
)
PRODUCTS_BY_ID = {p.id: p for p in PRODUCTS}

#: Country code -> label, in the order of the ``<select>`` on ``form/index.html``.
COUNTRIES: dict[str, str] = {
    "BR": "Brazil",
    "CA": "Canada",
    "FR": "France",
    "DE": "Germany",
    "IN": "India",
    "JP": "Japan",
    "KE": "Kenya",
    "MX": "Mexico",
}


def search_products(query: str) -> list[Product]:
    """Case-insensitive substring match of ``query`` over the product names, in catalog order."""
    needle = " ".join(query.split()).casefold()
    return [p for p in PRODUCTS if needle in p.name.casefold()]


def reference_code(name: str, country_code: str) -> str:
    """``REF-<initials>-<country code>``, e.g. ``reference_code("Ada Lovelace", "CA") == "REF-AL-CA"``."""
    initials = "".join(word[0] for word in name.split() if word[0].isalnum()).upper() or "X"
    return f"REF-{initials}-{country_code.upper()}"


#: How every catalog page's title ends.
SITE_TITLE = " — Widget World"


def page_facts(title: str) -> dict[str, str]:
    """What a catalog page shows, read from its title (what the offline model server sees of it):
    ``name`` and ``price`` on a product page, ``query`` and ``results`` on a search page."""
    if not title.endswith(SITE_TITLE):
        return {}
    head = title.removesuffix(SITE_TITLE)
    product = next((p for p in PRODUCTS if p.name == head), None)
    if product is not None:
        return {"name": product.name, "price": product.price}
    if head.startswith("Search: ") or head == "No results":
        query = head.removeprefix("Search: ") if head != "No results" else ""
        return {"query": query, "results": ", ".join(p.name for p in search_products(query)) if query else ""}
    return {}


# --------------------------------------------------------------------------- rendering

_CATALOG_HEADER = """<header class="banner"><a class="brand" href="/catalog/">Widget World</a>\
<span class="tagline">Everything a widget needs, since 1987.</span></header>
<form class="search" action="/catalog/search" method="get" role="search">
  <input class="search-input" data-testid="catalog-search-input" type="text" name="q" value="{value}" \
placeholder="Search products" aria-label="Search products" autocomplete="off">
  <button class="search-button" data-testid="catalog-search-button" type="submit">Search</button>
</form>
"""


def page(title: str, stylesheet: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        f'<link rel="stylesheet" href="{stylesheet}">\n</head>\n<body>\n{body}</body>\n</html>\n'
    )


def _catalog_page(title: str, query: str, body: str) -> str:
    header = _CATALOG_HEADER.format(value=html.escape(query, quote=True))
    return page(f"{title}{SITE_TITLE}", "/catalog/style.css", header + body)


def render_search(query: str) -> str:
    hits = search_products(query)
    shown = html.escape(query)
    if not hits:
        body = (
            f'<p class="results-title" data-testid="results-title">No results for “{shown}”</p>\n'
            '<div class="no-results" data-testid="no-results">'
            f"<p>No products match “{shown}”.</p>"
            "<p>Check the spelling or try a shorter name, such as “widget”.</p></div>\n"
        )
        return _catalog_page("No results", query, body)
    noun = "result" if len(hits) == 1 else "results"
    rows = [f'<p class="results-title" data-testid="results-title">{len(hits)} {noun} for “{shown}”</p>\n']
    for i, product in enumerate(hits):
        rows.append(
            f'<a class="result" data-testid="search-result-{i}" data-product-id="{product.id}" '
            f'href="/catalog/product/{product.id}" style="top: {210 + 72 * i}px">'
            f'<span class="name">{html.escape(product.name)}</span>'
            f'<span class="blurb">{html.escape(product.blurb)}</span>'
            '<span class="more">View details →</span></a>\n'
        )
    return _catalog_page(f"Search: {query}", query, "".join(rows))


def render_product(product: Product) -> str:
    body = (
        f'<h1 class="product-name" data-testid="product-name">{html.escape(product.name)}</h1>\n'
        f'<div class="product-price" data-testid="product-price">{product.price}</div>\n'
        f'<p class="product-blurb" data-testid="product-blurb">{html.escape(product.blurb)} '
        "In stock, ships within two working days.</p>\n"
        '<a class="back-link" href="/catalog/">← All products</a>\n'
    )
    return _catalog_page(product.name, "", body)


def render_product_missing(product_id: str) -> str:
    body = (
        '<div class="no-results" data-testid="product-missing">'
        f"<p>There is no product “{html.escape(product_id)}”.</p>"
        "<p>Use the search box above to find products.</p></div>\n"
    )
    return _catalog_page("Product not found", "", body)


def render_confirmation(values: dict[str, str]) -> str:
    def row(label: str, key: str, testid: str) -> str:
        return f'<dt>{label}</dt><dd data-testid="{testid}">{html.escape(values[key])}</dd>\n'

    body = (
        '<h1 class="title">Registration complete</h1>\n<dl class="summary" data-testid="confirm-summary">\n'
        + row("Name", "name", "confirm-name")
        + row("Email", "email", "confirm-email")
        + row("Country", "country_name", "confirm-country")
        + row("Terms", "terms", "confirm-terms")
        + "</dl>\n"
        '<div class="reference" data-testid="confirm-reference">'
        f"Reference code: {html.escape(values['ref'])}</div>\n"
    )
    return page("Registration complete", "/form/style.css", body)


def render_form_errors(problems: list[str]) -> str:
    items = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    body = (
        '<h1 class="title">Registration incomplete</h1>\n'
        f'<ul class="problems" data-testid="form-problems">{items}</ul>\n'
        '<a class="back-link" href="/form/">← Back to the form</a>\n'
    )
    return page("Registration incomplete", "/form/style.css", body)


def validate_registration(fields: dict[str, str]) -> tuple[dict[str, str] | None, list[str]]:
    name = " ".join(fields.get("name", "").split())
    email = fields.get("email", "").strip()
    country = fields.get("country", "").strip()
    terms = fields.get("terms", "").strip().lower()
    code = country.upper() if country.upper() in COUNTRIES else ""
    if not code:  # also accept the visible label, e.g. "Canada"
        code = next((c for c, label in COUNTRIES.items() if label.casefold() == country.casefold()), "")
    problems: list[str] = []
    if not name:
        problems.append("Please enter your full name.")
    if "@" not in email or email.startswith("@") or email.endswith("@"):
        problems.append("Please enter a valid email address.")
    if not code:
        problems.append("Please choose your country.")
    if terms not in ("yes", "on", "true", "1"):
        problems.append("You must accept the terms and conditions.")
    if problems:
        return None, problems
    values = {
        "name": name,
        "email": email,
        "country": code,
        "country_name": COUNTRIES[code],
        "terms": "yes",
        "ref": reference_code(name, code),
    }
    return values, []
