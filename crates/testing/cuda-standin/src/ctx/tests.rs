//! Unit tests of the device table: `GMUX_STANDIN_DEVICES`, `CUDA_VISIBLE_DEVICES` and the
//! UUIDs, as pure functions of the variables' values.

use std::process::{Command, Output};

use super::devices::{from_env, parse_count, uuid, uuid_text, visible, Devices};

const GPU2: &str = "GPU-676d7578-0000-0000-0000-000000000002";

#[test]
fn device_counts_parse() {
    assert_eq!(parse_count("3"), Some(3));
    assert_eq!(parse_count(" 8\n"), Some(8));
    for bad in ["0", "9", "", "-1", "+2", "two", "2.0"] {
        assert_eq!(parse_count(bad), None, "{bad:?}");
    }
}

#[test]
fn uuids_name_the_physical_device() {
    assert_eq!(uuid(2), [0x67, 0x6d, 0x75, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    assert_eq!(uuid_text(&uuid(2)), GPU2);
    assert_eq!(uuid_text(&uuid(7)), "GPU-676d7578-0000-0000-0000-000000000007");
}

#[test]
fn unset_shows_all_devices_in_order() {
    assert_eq!(visible(None, 3), [0, 1, 2]);
    assert_eq!(visible(None, 1), [0]);
}

#[test]
fn entries_are_indices_or_uuids_in_the_order_given() {
    assert_eq!(visible(Some("2,0"), 3), [2, 0]);
    assert_eq!(visible(Some(" 1 , 2 "), 3), [1, 2]);
    assert_eq!(visible(Some(&format!("{GPU2},1")), 3), [2, 1]);
    assert_eq!(visible(Some("GPU-676D7578-0000-0000-0000-000000000001"), 3), [1], "hex in either case");
}

#[test]
fn a_uuid_prefix_must_name_exactly_one_device() {
    assert_eq!(visible(Some("GPU-676d7578-0000-0000-0000-00000000000"), 1), [0]);
    assert_eq!(visible(Some("GPU-676d7578-0000-0000-0000-0000000000"), 3), [], "ambiguous");
    assert_eq!(visible(Some("1,GPU-676d7578"), 3), [1], "ambiguous, so the list ends");
    assert_eq!(visible(Some("GPU-676d7578-0000-0000-0000-000000000002"), 3), [2]);
}

#[test]
fn the_list_ends_at_an_invalid_or_repeated_entry() {
    assert_eq!(visible(Some("1,7,0"), 3), [1]);
    assert_eq!(visible(Some("0,1,0,2"), 3), [0, 1]);
    assert_eq!(visible(Some(&format!("2,{GPU2},0")), 3), [2], "a UUID naming a listed device");
    assert_eq!(visible(Some("0,,1"), 3), [0]);
    assert_eq!(visible(Some("MIG-1,0"), 3), []);
    assert_eq!(visible(Some("-1"), 3), []);
}

#[test]
fn an_empty_value_shows_no_device() {
    assert_eq!(visible(Some(""), 3), []);
    assert_eq!(Devices::new(3, Some("")).count(), 0);
}

#[test]
fn visible_ordinals_map_to_physical_devices() {
    let d = Devices::new(3, Some("2,0"));
    assert_eq!(d.count(), 2);
    assert_eq!((d.ordinal(0), d.ordinal(1), d.ordinal(2), d.ordinal(-1)), (Some(0), Some(1), None, None));
    assert_eq!((d.physical(0), d.uuid(0)[15]), (2, 2));
    assert_eq!(d.uuid(1), uuid(0));
    assert_eq!(d.name(0), "gmux CUDA stand-in (CPU) 2\0");
    assert_eq!(Devices::new(1, None).name(0), "gmux CUDA stand-in (CPU)\0", "one device keeps the plain name");
}

/// The test binary running [`solo::devices_from_env`] alone, with `env` set and the
/// device variables otherwise unset.
fn from_env_in_a_child(env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().unwrap();
    let args = ["ctx::tests::solo::devices_from_env", "--exact", "--ignored", "--nocapture", "--test-threads=1"];
    let mut cmd = Command::new(exe);
    cmd.args(args).env_remove("GMUX_STANDIN_DEVICES").env_remove("CUDA_VISIBLE_DEVICES");
    cmd.envs(env.iter().copied()).output().unwrap()
}

#[test]
fn the_variables_are_read_from_the_environment() {
    for (env, want) in [
        (&[][..], "Devices { installed: 1, physical: [0] }"),
        (&[("GMUX_STANDIN_DEVICES", "3")][..], "Devices { installed: 3, physical: [0, 1, 2] }"),
        (&[("GMUX_STANDIN_DEVICES", "3"), ("CUDA_VISIBLE_DEVICES", "2,0")][..], "Devices { installed: 3, physical: [2, 0] }"),
        (&[("GMUX_STANDIN_DEVICES", "3"), ("CUDA_VISIBLE_DEVICES", "")][..], "Devices { installed: 3, physical: [] }"),
    ] {
        let out = from_env_in_a_child(env);
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains(want), "{env:?}: {text}");
    }
}

#[test]
fn a_bad_device_count_aborts_naming_the_variable_and_range() {
    let out = from_env_in_a_child(&[("GMUX_STANDIN_DEVICES", "9")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cuda-standin: GMUX_STANDIN_DEVICES=\"9\" must be a whole number from 1 to 8"), "{stderr}");
}

mod solo {
    use super::*;

    #[test]
    #[ignore = "run in a process of its own, with the variables set, by the tests above"]
    fn devices_from_env() {
        println!("{:?}", from_env());
    }
}
