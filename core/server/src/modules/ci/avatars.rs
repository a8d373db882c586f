//! Generated avatars for users without one.
//!
//! The upstream web UI shows the signed-in user only as an avatar image, and that image is
//! the only way to the user menu (settings, sign-out). Users of the built-in `git` forge have
//! no forge avatar, so their `avatar_url` points here: an SVG with the login's initials on a
//! colour derived from the login. It is public like a forge's avatars and depends on nothing
//! but the login in the path, so it reveals nothing about which users exist.

use crate::http::{ApiError, HeaderValue, Request, Response, StatusCode, header};
use crate::state::Ctx;
use crate::store::users::{User, validate_login};

/// `GET /users/{login}/avatar.svg`.
pub async fn avatar(_ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let login = req.param("login");
    validate_login(login).map_err(ApiError::bad_request)?;
    Ok(
        Response::new(StatusCode::OK, "image/svg+xml", svg(login)).with_header(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=86400"),
        ),
    )
}

/// The stable URL of `login`'s generated avatar on this server.
pub fn url_for(ctx: &Ctx, login: &str) -> String {
    format!(
        "{}{}/users/{login}/avatar.svg",
        ctx.public_url(),
        ctx.config.ci.mount
    )
}

/// `user` as the API shows it: an empty `avatar_url` becomes the generated avatar's URL.
pub fn shown(ctx: &Ctx, mut user: User) -> User {
    if user.avatar_url.is_empty() {
        user.avatar_url = url_for(ctx, &user.login);
    }
    user
}

/// Up to two letters: the first of each of the first two words (`john-doe` → `JD`), else the
/// first two characters. Logins hold only ASCII letters, digits, `.`, `_` and `-`.
fn initials(login: &str) -> String {
    let words: Vec<&str> = login
        .split(['.', '_', '-'])
        .filter(|w| !w.is_empty())
        .collect();
    let picked: String = match words.as_slice() {
        [first, second, ..] => first
            .chars()
            .take(1)
            .chain(second.chars().take(1))
            .collect(),
        [only] => only.chars().take(2).collect(),
        [] => "?".to_string(),
    };
    picked.to_ascii_uppercase()
}

/// A hue in degrees from the login (FNV-1a), so a user keeps their colour.
fn hue(login: &str) -> u32 {
    let hash = login.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % 360
}

fn svg(login: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"64\" height=\"64\" viewBox=\"0 0 64 64\">\
         <rect width=\"64\" height=\"64\" fill=\"hsl({hue}, 45%, 42%)\"/>\
         <text x=\"32\" y=\"32\" dy=\".35em\" text-anchor=\"middle\" font-family=\"sans-serif\" \
         font-size=\"26\" fill=\"#fff\">{text}</text></svg>",
        hue = hue(login),
        text = initials(login),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initials_come_from_the_login() {
        assert_eq!(initials("alice"), "AL");
        assert_eq!(initials("john-doe"), "JD");
        assert_eq!(initials("x"), "X");
        assert_eq!(initials("a.b_c"), "AB");
        assert_eq!(initials("--"), "?");
    }

    #[test]
    fn the_colour_is_stable_and_the_svg_well_formed() {
        assert_eq!(hue("alice"), hue("alice"));
        let s = svg("alice");
        assert!(s.starts_with("<svg ") && s.ends_with("</svg>"));
        assert!(s.contains(">AL</text>"));
    }
}
