"""The profile store: Parquet tables plus profile.json in a ``NAME.aiprof`` folder."""

from .reader import Profile, find_profiles, is_profile, open_profile
from .schema import DEVICE_KINDS, DEVICE_TYPES, KINDS, SCHEMA_VERSION, SCHEMAS, TABLES
from .writer import PROFILE_SUFFIX, ProfileWriter, profile_path

__all__ = [
    "DEVICE_KINDS",
    "DEVICE_TYPES",
    "KINDS",
    "PROFILE_SUFFIX",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "TABLES",
    "Profile",
    "ProfileWriter",
    "find_profiles",
    "is_profile",
    "open_profile",
    "profile_path",
]
