//! Woodpecker's `page` / `perPage` query parameters, read the same by every list (the CI
//! API's and the built-in UI's).
//!
//! Lenient like upstream: a missing or unusable `page` is 1, a missing or out-of-range
//! `perPage` is the maximum (50). No totals, no headers: clients read until a short page.

use super::request::Request;

/// The largest page a list gives.
pub const MAX_PER_PAGE: u32 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub page: u32,
    pub per_page: u32,
}

impl Page {
    pub fn from_request(req: &Request) -> Page {
        let page = req
            .query("page")
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| *p >= 1)
            .unwrap_or(1);
        let per_page = req
            .query("perPage")
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| (1..=MAX_PER_PAGE).contains(p))
            .unwrap_or(MAX_PER_PAGE);
        Page { page, per_page }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn page(q: &str) -> Page {
        Page::from_request(&Request::new(Method::GET, &format!("/x?{q}")))
    }

    #[test]
    fn defaults_and_caps() {
        assert_eq!(
            page(""),
            Page {
                page: 1,
                per_page: 50
            }
        );
        assert_eq!(
            page("page=3&perPage=10"),
            Page {
                page: 3,
                per_page: 10
            }
        );
        assert_eq!(
            page("page=0&perPage=500"),
            Page {
                page: 1,
                per_page: 50
            }
        );
        assert_eq!(
            page("page=x&perPage=-1"),
            Page {
                page: 1,
                per_page: 50
            }
        );
    }
}
