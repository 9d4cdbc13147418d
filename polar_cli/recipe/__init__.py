"""Recipe: the pydantic configuration tree of a run, YAML loading and `--set` overrides."""

from polar_cli.recipe.load import dump_recipe, load_recipe, recipe_from_dict
from polar_cli.recipe.schema import Recipe

__all__ = ["Recipe", "dump_recipe", "load_recipe", "recipe_from_dict"]
